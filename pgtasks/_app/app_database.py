"""DatabaseApp: an App's database as its users see it (a base of App): the DSN, pooled
connections for your own queries, migrations and the schema check, the statements
(``app.queries``), and a switch to another database (tests and tools)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg

from .._store.database import Database
from .._store.migrator import DEFAULT_LOCK_RETRY_FOR, DEFAULT_LOCK_TIMEOUT, MigrationPlan
from .._store.queries import Queries
from ..sql import Migration
from .settings import AppSettings, DeprecatedAlias
from .store_router import StoreRouter


class DatabaseApp:
    """The database methods of App (see the module docstring)."""

    settings: AppSettings
    database: Database
    store_name: str
    store_router: StoreRouter

    def close(self) -> None:
        raise NotImplementedError  # App's

    # -- configuration --
    @property
    def dsn(self) -> str:
        """The DSN in use; starts the embedded server when none is configured."""
        return self.database.dsn

    @property
    def uses_embedded(self) -> bool:
        return self.database.configured_dsn is None

    def describe_database(self) -> str:
        """Where the app connects, for logs (never the password)."""
        return self.database.describe()

    # -- database --
    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection (autocommit) with the schema checked, for your own queries."""
        with self.database.connection() as conn:
            yield conn

    @asynccontextmanager
    async def aconnection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self.database.aconnection() as conn:
            yield conn

    def migrate(
        self,
        *,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        lock_retry_for: float = DEFAULT_LOCK_RETRY_FOR,
    ) -> list[Migration]:
        """Create or upgrade the schema; safe to run concurrently and repeatedly.

        Online on a live database: indexes are built concurrently, each catalog change
        waits at most ``lock_timeout`` seconds for its lock (then rolls back and is tried
        again, for up to ``lock_retry_for`` seconds: MigrationLockError after that), large
        backfills go in batches. Runs on the session connection (``session_dsn``).
        """
        options = {"lock_timeout": lock_timeout, "lock_retry_for": lock_retry_for}
        if self.settings.store is None:  # the root: every store, then each numbered
            return self.store_router.migrate(**options)  # (a store's App: its own)
        return self.database.migrate(**options)

    def migration_plan(
        self,
        *,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        lock_retry_for: float = DEFAULT_LOCK_RETRY_FOR,
    ) -> MigrationPlan:
        """What :meth:`migrate` would do: each pending step and the locks it takes
        (``pgtasks migrate --plan``). Reads only."""
        return self.database.migration_plan(
            lock_timeout=lock_timeout, lock_retry_for=lock_retry_for
        )

    def check_schema(self) -> None:
        """Raise SchemaNotMigratedError / SchemaTooNewError unless the schema is current
        (and, for an App of several stores, ConfigurationError for two of one number)."""
        self.database.schema_checked = False
        with self.database.connection():
            pass
        self.store_router.check()  # of several stores: none with another's number or uid

    @property
    def schema(self) -> str:
        """The PostgreSQL schema of this App's tables."""
        return self.database.queries.schema

    @property
    def queries(self) -> Queries:
        """Every statement pgtasks runs, rendered for this App's schema."""
        return self.database.queries

    store = DeprecatedAlias("queries")  # the former name of queries

    def use_database(
        self,
        dsn: str | None,
        schema: str | None = None,
        *,
        session_dsn: str | None = None,
        replica_dsn: str | None = None,
        pooled: bool | None = None,
    ) -> Database:
        """Point this App at another database and schema (None: the embedded server; the
        current schema); its pools are closed first. Returns the Database used until
        now, for :meth:`restore_database`. The session DSN, replica and pooling are those
        given here (none by default), never the previous database's. For tests
        (``pgtasks.testing.use_test_database``) and tools; not while a worker runs.
        """
        previous = self.database
        where = dataclasses.replace(
            self.settings.database,
            dsn=dsn,
            schema=schema or self.schema,
            session_dsn=session_dsn,
            replica_dsn=replica_dsn,
            pooled=pooled,
        )
        self.restore_database(Database(where, self.settings.pools))
        return previous

    def restore_database(self, database: Database) -> None:
        """Switch back to a Database that :meth:`use_database` returned (pools closed)."""
        self.close()
        self.database = database  # (an App of several stores: its store's)
        layout = self.store_router.use(self.store_name, database)
        self.settings = dataclasses.replace(
            self.settings, database=database.settings, layout=layout
        )
