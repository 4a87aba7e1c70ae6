"""MigrationQueries: the migrations table and what the migrator runs (sql/migrations.sql)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from ..sql import Migration
from .base import ADVISORY_LOCK_CLASS_MIGRATE, Params, QueriesBase, Row, translate_errors


class MigrationQueries(QueriesBase):
    # -- the migrations table --
    def create_migrations_table(self, conn: psycopg.Connection[Any]) -> None:
        self._rows(conn, "create_migrations_table", None)

    def get_applied_migrations(self, conn: psycopg.Connection[Any]) -> set[int]:
        return {row["version"] for row in self._rows(conn, "get_applied_migrations", None)}

    def record_migration(self, conn: psycopg.Connection[Any], migration: Migration) -> None:
        params = {"version": migration.version, "name": migration.name}
        self._rows(conn, "record_migration", params)

    # -- the migrator's session --
    def lock_migrations_session(self, conn: psycopg.Connection[Any]) -> bool:
        """Try to take the schema's migration lock for ``conn``'s session."""
        rows = self._rows(
            conn, "lock_migrations_session", self._lock_params(ADVISORY_LOCK_CLASS_MIGRATE)
        )
        return bool(rows[0]["locked"])

    def wait_migrations_session(self, conn: psycopg.Connection[Any]) -> None:
        """Wait for the schema's migration lock, then hold it for ``conn``'s session."""
        self._rows(conn, "wait_migrations_session", self._lock_params(ADVISORY_LOCK_CLASS_MIGRATE))

    def unlock_migrations_session(self, conn: psycopg.Connection[Any]) -> bool:
        rows = self._rows(
            conn, "unlock_migrations_session", self._lock_params(ADVISORY_LOCK_CLASS_MIGRATE)
        )
        return bool(rows[0]["unlocked"])

    def configure_migration_session(self, conn: psycopg.Connection[Any], *, local: bool) -> Row:
        """No statement or lock timeout (``local``: for the current transaction only); the
        previous values, for :meth:`restore_migration_session`."""
        return self._rows(conn, "configure_migration_session", {"local": local})[0]

    def restore_migration_session(
        self, conn: psycopg.Connection[Any], *, statement_timeout: str, lock_timeout: str
    ) -> None:
        params = {"statement_timeout": statement_timeout, "lock_timeout": lock_timeout}
        self._rows(conn, "restore_migration_session", params)

    def set_step_lock_timeout(self, conn: psycopg.Connection[Any], seconds: float) -> None:
        """``lock_timeout`` for the rest of the current transaction."""
        params = {"lock_timeout": f"{max(1, round(seconds * 1000))}ms"}
        self._rows(conn, "set_step_lock_timeout", params)

    def get_migration_tables(self, conn: psycopg.Connection[Any]) -> Row:
        """``migrations`` and ``steps``: whether each table exists."""
        return self._rows(conn, "get_migration_tables", {"schema": self.schema})[0]

    def get_applied_steps(self, conn: psycopg.Connection[Any]) -> set[tuple[int, int]]:
        return {
            (row["version"], row["step"]) for row in self._rows(conn, "get_applied_steps", None)
        }

    def record_migration_step(self, conn: psycopg.Connection[Any], version: int, step: int) -> None:
        self._rows(conn, "record_migration_step", {"version": version, "step": step})

    def clear_migration_steps(self, conn: psycopg.Connection[Any], version: int) -> None:
        self._rows(conn, "clear_migration_steps", {"version": version})

    def get_index_state(self, conn: psycopg.Connection[Any], name: str) -> bool | None:
        """True: the index exists and is valid; False: it exists, invalid; None: absent."""
        rows = self._rows(conn, "get_index_state", {"schema": self.schema, "name": name})
        return bool(rows[0]["valid"]) if rows else None

    def get_lock_holders(
        self, conn: psycopg.Connection[Any], relations: Sequence[str]
    ) -> list[Row]:
        params = {"schema": self.schema, "relations": list(relations)}
        return self._rows(conn, "get_lock_holders", params)

    def get_partitions(self, conn: psycopg.Connection[Any], table: str) -> list[Row]:
        """The partitions under ``table``, parents first (name, parent, leaf)."""
        return self._rows(conn, "get_partitions", {"schema": self.schema, "table": table})

    def get_table_indexes(self, conn: psycopg.Connection[Any], table: str) -> list[Row]:
        """The indexes of ``table`` (name, valid, definition, attached_to)."""
        return self._rows(conn, "get_table_indexes", {"schema": self.schema, "table": table})

    def run_index_sql(self, conn: psycopg.Connection[Any], template: str, **names: str) -> None:
        """A statement of a partitioned index build: ``template`` (a migration's text) with
        ``{schema}`` and the relations of ``names`` as identifiers."""
        identifiers = {key: sql.Identifier(value) for key, value in names.items()}
        statement = sql.SQL(template).format(schema=self._identifier, **identifiers)
        with translate_errors(self.schema):
            conn.execute(statement)

    # -- composed statements (a migration's own text, a table named by a batched step) --
    def run_migration_sql(
        self, conn: psycopg.Connection[Any], text: str, params: Params | None = None
    ) -> int:
        """Run a migration step's statements (rendered for the schema); the rows the last
        one affected. With ``params`` (a batched step) the text is one statement."""
        rendered = self._render(text)
        with translate_errors(self.schema):
            cursor = (
                conn.execute(rendered, params) if params is not None else conn.execute(rendered)
            )
        return max(0, cursor.rowcount)

    def get_id_range(self, conn: psycopg.Connection[Any], table: str) -> tuple[int, int] | None:
        """(lowest, highest) ``id`` of a table of the schema; None when it is empty."""
        statement = sql.SQL("SELECT min(id), max(id) FROM {}.{}").format(
            sql.Identifier(self.schema), sql.Identifier(table)
        )
        with translate_errors(self.schema):
            row = conn.execute(statement).fetchone()
        if row is None or row[0] is None:
            return None
        return int(row[0]), int(row[1])
