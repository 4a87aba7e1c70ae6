"""Fixtures of the operations CLI tests: the ops app on the test's schema, a connection
to it, and a runner of ``pgtasks <command> -A tests.apps.ops_app:app``."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest

from pgtasks import App
from tests.apps.ops_app import LEASE_TIMEOUT
from tests.support.cli import Cli, Connection, cli_runner


@pytest.fixture
def ops_app(make_app: Callable[..., App]) -> App:
    return make_app(lease_timeout=LEASE_TIMEOUT, heartbeat_interval=1.0)


@pytest.fixture
def conn(ops_app: App) -> Iterator[Connection]:
    with psycopg.connect(ops_app.dsn, autocommit=True) as connection:
        yield connection


@pytest.fixture
def cli(ops_app: App) -> Cli:
    """Run ``pgtasks <arguments> -A tests.apps.ops_app:app`` on the test's schema."""
    return cli_runner(ops_app)
