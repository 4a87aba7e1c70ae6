"""Fixtures shared by the integration tests."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgtasks import App


@pytest.fixture
def notifications(admin: psycopg.Connection[Any], app: App) -> Iterator[Callable[[str], list[str]]]:
    """LISTEN on the app's channel; the callable collects payloads up to a marker payload."""
    admin.execute(sql.SQL("LISTEN {}").format(sql.Identifier(app.queries.channel)))

    def collect_until(marker: str) -> list[str]:
        payloads = []
        for notify in admin.notifies(timeout=10):
            assert notify.channel == app.queries.channel
            payloads.append(notify.payload)
            if notify.payload == marker:
                return payloads
        raise AssertionError(f"no notification {marker!r} within 10 s; got {payloads}")

    yield collect_until
    admin.execute("UNLISTEN *")


@pytest.fixture
def other_database(dsn: str) -> Iterator[str]:
    """A database of its own on the test server (a store elsewhere than the business data)."""
    name = f"pgtasks_store_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    info["dbname"] = name
    yield psycopg.conninfo.make_conninfo(**info)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
