"""Fixtures: a real PostgreSQL (embedded, or PGTASKS_TEST_DSN) and an isolated schema per test."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgtasks import App
from pgtasks._embedded import embedded_dsn

ROOT = Path(__file__).resolve().parent.parent


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


def new_schema_name() -> str:
    return f"test_{secrets.token_hex(4)}"


def drop_schema(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


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
