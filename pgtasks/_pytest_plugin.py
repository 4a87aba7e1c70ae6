"""The pytest fixtures of ``pgtasks.testing`` (loaded through its ``pytest_plugins``).

Fixtures only, no hooks: nothing changes for a test that does not ask for them.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ._app.app import App
from ._embedded import embedded_dsn
from .testing import isolated_schema, use_test_database

#: Environment variable naming the PostgreSQL server tests use instead of the embedded one.
TEST_DSN_ENVIRONMENT = "PGTASKS_TEST_DSN"
#: Directory, under pytest's rootdir, of the embedded test server.
EMBEDDED_TEST_DIR = ".pgtasks-test"


@pytest.fixture(scope="session")
def pgtasks_dsn(request: pytest.FixtureRequest) -> str:
    """The test server: ``PGTASKS_TEST_DSN``, or the embedded server in ``<rootdir>/.pgtasks-test``.

    Override this fixture in your conftest.py to choose another server.
    """
    configured = os.environ.get(TEST_DSN_ENVIRONMENT)
    if configured:
        return configured
    return embedded_dsn(request.config.rootpath / EMBEDDED_TEST_DIR)


@pytest.fixture
def pgtasks_schema(pgtasks_dsn: str) -> Iterator[str]:
    """A migrated schema of this test's own on ``pgtasks_dsn``, dropped afterwards."""
    with isolated_schema(pgtasks_dsn) as schema:
        yield schema


@pytest.fixture
def pgtasks_isolate(pgtasks_dsn: str, pgtasks_schema: str) -> Iterator[Callable[[App], App]]:
    """Call it with your App: the App uses this test's schema until the test ends."""
    with contextlib.ExitStack() as stack:

        def isolate(app: App) -> App:
            return stack.enter_context(use_test_database(app, pgtasks_dsn, pgtasks_schema))

        yield isolate


@pytest.fixture
def pgtasks_app_factory(pgtasks_dsn: str, pgtasks_schema: str) -> Iterator[Callable[..., App]]:
    """Build new Apps on this test's schema: ``pgtasks_app_factory(**App options)``."""
    apps: list[App] = []

    def factory(**options: Any) -> App:
        options.setdefault("schema", pgtasks_schema)
        app = App(pgtasks_dsn, **options)
        apps.append(app)
        return app

    yield factory
    for app in apps:
        app.close()
