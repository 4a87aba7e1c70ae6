"""Test schemas: random names and dropping."""

from __future__ import annotations

import secrets

import psycopg
from psycopg import sql


def new_schema_name() -> str:
    return f"test_{secrets.token_hex(4)}"


def drop_schema(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
