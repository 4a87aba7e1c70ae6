"""Migrations produce exactly the schema committed in tests/schema.sql (no drift)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from pgtasks import App
from tests.support.environment import ROOT
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
