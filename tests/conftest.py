"""Fixtures: a real PostgreSQL (embedded, or PGTASKS_TEST_DSN) and an isolated schema per test."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from pgtasks import App
from pgtasks._embedded import embedded_dsn
from tests.support.environment import ROOT
from tests.support.schemas import drop_schema, new_schema_name


@pytest.fixture(scope="session")
def dsn() -> str:
    """The test server: PGTASKS_TEST_DSN, or the embedded server in .pgtasks-test/."""
    configured = os.environ.get("PGTASKS_TEST_DSN")
    if configured:
        return configured
    return embedded_dsn(ROOT / ".pgtasks-test")


@pytest.fixture
def admin(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain autocommit connection for assertions and setup."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def make_app(dsn: str) -> Iterator[Callable[..., App]]:
    """Build Apps on the test server, each in its own schema (dropped afterwards)."""
    apps: list[App] = []

    def factory(*, migrate: bool = True, **options: Any) -> App:
        options.setdefault("schema", new_schema_name())
        options.setdefault("connect_timeout", 3.0)
        app = App(dsn, **options)
        apps.append(app)
        if migrate:
            app.migrate()
        return app

    yield factory
    for app in apps:
        app.close()
        drop_schema(dsn, app.schema)


@pytest.fixture
def app(make_app: Callable[..., App]) -> App:
    """A migrated App in a fresh schema."""
    return make_app()
