"""Migrator: applies the numbered SQL migrations shipped in ``pgtasks/sql/migrations``.

Each migration runs in its own transaction that first takes a transaction-level
advisory lock on the schema, re-reads the applied versions, records its version,
then runs the file. Two migrators started at once therefore apply each migration
exactly once; re-running is a no-op.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from .._errors import SchemaNotMigratedError, SchemaTooNewError
from ..sql import Migration, load_migrations
from .store import Store

logger = logging.getLogger("pgtasks.migrate")

MIGRATE_COMMAND = "pgtasks migrate -A module:app"


def head_version() -> int:
    return len(load_migrations())


class Migrator:
    def __init__(self, store: Store) -> None:
        self.store = store

    def migrate(self, conn: psycopg.Connection[Any]) -> list[Migration]:
        """Apply every pending migration; returns those this call applied."""
        applied_now: list[Migration] = []
        for migration in load_migrations():
            with conn.transaction():
                self.store.lock_migrations(conn)
                self.store.create_migrations_table(conn)
                if migration.version in self.store.get_applied_migrations(conn):
                    continue
                self.store.record_migration(conn, migration)
                self.store.apply_migration(conn, migration)
            logger.info(
                "applied migration %04d_%s to schema %s",
                migration.version,
                migration.name,
                self.store.schema,
            )
            applied_now.append(migration)
        return applied_now

    def check(self, version: int) -> None:
        """Raise unless ``version`` (read from the database) is this code's head."""
        check_version(self.store.schema, version)


def check_version(schema: str, version: int) -> None:
    head = head_version()
    if version < head:
        raise SchemaNotMigratedError(
            f"the pgtasks schema {schema!r} is at version {version}, this code needs {head}:"
            f" run `{MIGRATE_COMMAND}` (or app.migrate())"
        )
    if version > head:
        raise SchemaTooNewError(
            f"the pgtasks schema {schema!r} is at version {version}, newer than this code"
            f" ({head}): upgrade pgtasks on this host"
        )
