"""Migrations produce exactly the schema committed in tests/schema.sql (no drift)."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgtasks import App
from pgtasks.sql import load_migrations
from tests.support.environment import ROOT
from tests.support.schemas import (
    SchemaAdmin,
    migrated_schema_script,
    new_schema_name,
    render_migrated_schema_script,
)
from tests.support.snapshot import describe_schema


def test_migrated_schema_matches_the_committed_snapshot(
    make_app: Callable[..., App], admin: psycopg.Connection[Any]
) -> None:
    app = make_app()

    actual = describe_schema(admin, app.schema)
    expected = (ROOT / "tests" / "schema.sql").read_text()

    assert actual == expected, (
        "the migrated schema differs from tests/schema.sql: if a migration changed it on"
        " purpose, run `python3 scripts/dump-schema` and commit the result"
    )


def test_the_snapshot_does_not_depend_on_the_schema_name(
    make_app: Callable[..., App], admin: psycopg.Connection[Any]
) -> None:
    first, second = make_app(schema="Snapshot_A"), make_app(schema="select")

    assert describe_schema(admin, first.schema) == describe_schema(admin, second.schema)


def test_a_schema_made_in_one_round_trip_equals_a_migrated_one(
    make_app: Callable[..., App],
    schema_admin: SchemaAdmin,
    admin: psycopg.Connection[Any],
) -> None:
    """The schemas make_app gives tests outside tests/migration are the Migrator's own."""
    migrated = make_app()
    # Dropped by make_app, created here; a name that needs quoting.
    made = make_app(migrate=False, schema=f"Round_Trip_{secrets.token_hex(3)}")

    schema_admin.create_migrated(made.schema)

    assert describe_schema(admin, made.schema) == describe_schema(admin, migrated.schema)
    versions = "SELECT version, name FROM {}.migrations ORDER BY version"
    assert [
        admin.execute(sql.SQL(versions).format(sql.Identifier(app.schema))).fetchall()
        for app in (made, migrated)
    ] == [[(m.version, m.name) for m in load_migrations()]] * 2
    made.check_schema()  # the App accepts it as current


def test_the_script_reused_for_test_schema_names_is_the_one_rendered_for_the_name() -> None:
    """make_app's names reuse one rendered script with the name written in: the same bytes."""
    for name in (new_schema_name(), new_schema_name()):
        assert migrated_schema_script(name) == render_migrated_schema_script(name)
    assert migrated_schema_script("Round_Trip") == render_migrated_schema_script("Round_Trip")


def test_make_app_in_tests_migration_runs_the_migrator(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    """tests/migration/conftest.py keeps the pre-migrated schemas out of these tests."""
    with caplog.at_level(logging.INFO, logger="pgtasks.migrate"):
        app = make_app()

    applied = [r.getMessage() for r in caplog.records if r.name == "pgtasks.migrate"]
    assert applied == [
        f"applied migration {m.version:04d}_{m.name} to schema {app.schema}"
        for m in load_migrations()
    ]
