"""Migrator: applies the numbered migrations shipped in ``pgtasks/sql/migrations``, step
by step, without stopping enqueues and claims on a large table.

One migrator per schema at a time: it holds the schema's migration advisory lock for its
whole run (a session lock; a second migrator waits, then finds everything applied). Each
step of a migration (``pgtasks/sql/steps.py``) runs as its kind says:

- a transaction step sets a short ``lock_timeout`` (``lock_timeout``, 0.25 s by default):
  a catalog change that cannot get its lock in time rolls back and is tried again after
  a backoff, for up to ``lock_retry_for`` seconds, so the table's readers and writers
  never queue behind it for longer than that. Its transaction also takes the migration
  lock at transaction level (what migrators before online steps took).
- a concurrently step runs alone, outside a transaction. An invalid index left by an
  earlier build that failed is dropped (concurrently) and built again; a valid one is kept.
- a batched step walks the table's ids ``size`` at a time, one transaction per batch
  (each under ``lock_timeout``, retried), until it has passed the highest id.

Steps done are recorded in ``<schema>.migration_steps`` (in the step's transaction where
there is one), the version in ``<schema>.migrations`` with the last step: a migrator
stopped in the middle resumes at the first step not done. A schema being created (no
migration applied yet: its tables are empty) gets each migration as one transaction.
A connection already inside a transaction (Django's migrations) gets the same, as
before online steps existed, with a warning when the schema is not new.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus

from .._errors import (
    MigrationLockError,
    SchemaNotMigratedError,
    SchemaTooNewError,
    ServerVersionError,
)
from .._validation import positive_seconds
from ..sql import Migration, load_migrations, migration_versions
from ..sql.steps import Step
from . import partition_indexes
from .migration_plan import (
    MigrationPlan as MigrationPlan,
)
from .migration_plan import (
    PlannedStep,
)
from .migration_plan import (
    plan_migrations as plan_migrations,
)
from .queries import Queries

logger = logging.getLogger("pgtasks.migrate")

MIGRATE_COMMAND = "pgtasks migrate -A module:app"
#: The oldest PostgreSQL the migrations run on (``server_version_num``): ``date_bin``
#: (uniqueness windows) is PostgreSQL 14's; BEFORE row triggers on the partitioned
#: jobs_history need 13.
MINIMUM_SERVER_VERSION = 140000


def check_server_version(version: int) -> None:
    """Raise ServerVersionError for a server older than MINIMUM_SERVER_VERSION.

    ``version`` is libpq's ``server_version`` (``150018`` for 15.18, ``90624`` for 9.6.24).
    """
    if version >= MINIMUM_SERVER_VERSION:
        return
    major = version // 10000
    shown = f"{major}.{version % 10000}" if major >= 10 else f"{major}.{version // 100 % 100}"
    raise ServerVersionError(
        f"pgtasks needs PostgreSQL {MINIMUM_SERVER_VERSION // 10000} or later; this server"
        f" runs PostgreSQL {shown}: upgrade the server (nothing was migrated)"
    )


#: Longest wait for a lock of a transactional step (or a batch) before it is retried.
DEFAULT_LOCK_TIMEOUT = 0.25
#: How long a step whose lock is not granted is retried before the migration fails.
DEFAULT_LOCK_RETRY_FOR = 600.0
#: Longest pause between two tries of a step whose lock was not granted.
MAX_RETRY_PAUSE = 5.0
#: Errors after which a transactional step is tried again (it rolled back whole).
_RETRIED = (pg_errors.LockNotAvailable, pg_errors.DeadlockDetected)


def head_version() -> int:
    """This code's schema version: the last migration's number (file names only)."""
    return migration_versions()[-1]


class Migrator:
    """Applies migrations (all shipped ones by default) to one Queries's schema."""

    def __init__(
        self,
        store: Queries,
        *,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        lock_retry_for: float = DEFAULT_LOCK_RETRY_FOR,
        migrations: Sequence[Migration] | None = None,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self.queries = store
        self.lock_timeout = positive_seconds("lock_timeout=", lock_timeout)
        if lock_retry_for < 0:
            raise ValueError(f"lock_retry_for= must be >= 0, got {lock_retry_for!r}")
        self.lock_retry_for = float(lock_retry_for)
        self.migrations = tuple(migrations) if migrations is not None else load_migrations()
        self._sleep = sleep

    # -- the plan --
    def plan(self, conn: psycopg.Connection[Any]) -> MigrationPlan:
        """What :meth:`migrate` would do now, read without writing anything."""
        tables = self.queries.get_migration_tables(conn)
        applied = self.queries.get_applied_migrations(conn) if tables["migrations"] else set()
        steps_done = self.queries.get_applied_steps(conn) if tables["steps"] else set()
        locks = plan_migrations(self.migrations)
        planned = tuple(
            PlannedStep(
                migration,
                step,
                locks[(migration.version, step.number)],
                (migration.version, step.number) in steps_done,
            )
            for migration in self.migrations
            if migration.version not in applied
            for step in migration.steps
        )
        return MigrationPlan(
            schema=self.queries.schema,
            version=max(applied, default=0),
            head=max((migration.version for migration in self.migrations), default=0),
            fresh=not applied and not steps_done,
            steps=planned,
            lock_timeout=self.lock_timeout,
            lock_retry_for=self.lock_retry_for,
        )

    # -- applying --
    def migrate(
        self,
        conn: psycopg.Connection[Any],
        *,
        while_locked: Callable[[psycopg.Connection[Any]], object] | None = None,
    ) -> list[Migration]:
        """Apply every pending migration; returns those this call applied.

        ``conn`` is a direct connection (never through a transaction pooler): autocommit
        for online steps, or inside a transaction (each migration then runs whole in it).
        ``while_locked(conn)`` runs after the migrations of an autocommit ``conn``, still
        under the migration lock (jobs_history's first days, created by no other session
        at once).
        """
        check_server_version(conn.info.server_version)
        if not conn.autocommit or conn.info.transaction_status != TransactionStatus.IDLE:
            return self._migrate_in_transaction(conn)
        previous = self.queries.configure_migration_session(conn, local=False)
        try:
            self._take_session_lock(conn)
            try:
                applied = self._migrate_online(conn)
                if while_locked is not None:
                    while_locked(conn)
                return applied
            finally:
                if not conn.closed and not conn.broken:
                    self.queries.unlock_migrations_session(conn)
        finally:
            if not conn.closed and not conn.broken:
                self.queries.restore_migration_session(
                    conn,
                    statement_timeout=previous["statement_timeout"],
                    lock_timeout=previous["lock_timeout"],
                )

    def _take_session_lock(self, conn: psycopg.Connection[Any]) -> None:
        if not self.queries.lock_migrations_session(conn):
            logger.info(
                "another migrator is migrating schema %s; waiting for it", self.queries.schema
            )
            self.queries.wait_migrations_session(conn)

    def _migrate_online(self, conn: psycopg.Connection[Any]) -> list[Migration]:
        store = self.queries
        with conn.transaction():
            store.create_migrations_table(conn)
        applied = store.get_applied_migrations(conn)
        steps_done = store.get_applied_steps(conn)
        fresh = not applied and not steps_done
        applied_now: list[Migration] = []
        for migration in self.migrations:
            if migration.version in applied:
                continue
            if fresh:
                self._apply_whole(conn, migration)
            else:
                self._apply_steps(conn, migration, steps_done)
            logger.info("applied migration %s to schema %s", migration.label, store.schema)
            applied_now.append(migration)
        return applied_now

    def _migrate_in_transaction(self, conn: psycopg.Connection[Any]) -> list[Migration]:
        store = self.queries
        applied_now: list[Migration] = []
        with conn.transaction():
            store.configure_migration_session(conn, local=True)
            store.lock_migrations(conn)
            store.create_migrations_table(conn)
            applied = store.get_applied_migrations(conn)
        for migration in self.migrations:
            if migration.version in applied:
                continue
            if applied and migration.online:
                logger.warning(
                    "migration %s runs inside the caller's transaction: its indexes are built"
                    " without CONCURRENTLY and block writes to the table while they build;"
                    " run `%s` outside a transaction to apply it online",
                    migration.label,
                    MIGRATE_COMMAND,
                )
            with conn.transaction():
                store.lock_migrations(conn)
                if migration.version in store.get_applied_migrations(conn):
                    continue
                self._run_whole(conn, migration)
            logger.info("applied migration %s to schema %s", migration.label, store.schema)
            applied_now.append(migration)
        return applied_now

    def _run_whole(self, conn: psycopg.Connection[Any], migration: Migration) -> None:
        for step in migration.steps:
            self.queries.run_migration_sql(conn, step.in_transaction_text())
        self.queries.record_migration(conn, migration)

    def _apply_whole(self, conn: psycopg.Connection[Any], migration: Migration) -> None:
        """A migration of a new schema: its steps in one transaction (the tables are empty)."""
        with conn.transaction():
            self.queries.lock_migrations(conn)
            self._run_whole(conn, migration)

    def _apply_steps(
        self, conn: psycopg.Connection[Any], migration: Migration, steps_done: set[tuple[int, int]]
    ) -> None:
        version = migration.version
        pending = [step for step in migration.steps if (version, step.number) not in steps_done]
        if len(pending) < len(migration.steps):
            logger.info(
                "migration %s resumes at step %d of %d (an earlier run stopped after the steps"
                " before it)",
                migration.label,
                pending[0].number if pending else len(migration.steps),
                len(migration.steps),
            )
        if not pending:  # every step done, the version not recorded yet
            self._in_retried_transaction(conn, migration, None, lambda: None)
            return
        for step in pending:
            started = time.monotonic()
            last = step is pending[-1]
            if step.kind == "transaction":
                self._in_retried_transaction(
                    conn,
                    migration,
                    step if not last else None,
                    functools.partial(self.queries.run_migration_sql, conn, step.text),
                    step=step,
                )
            elif step.kind == "concurrently":
                self._run_concurrently(conn, migration, step)
                self._record(conn, migration, step, last)
            else:
                self._run_batched(conn, migration, step)
                self._record(conn, migration, step, last)
            logger.info(
                "migration %s step %d of %d (%s) done in %.2f s",
                migration.label,
                step.number,
                len(migration.steps),
                step.kind,
                time.monotonic() - started,
            )

    def _record(
        self, conn: psycopg.Connection[Any], migration: Migration, step: Step, last: bool
    ) -> None:
        """Record a step done outside a transaction (and the version after the last one)."""
        self._in_retried_transaction(conn, migration, None if last else step, lambda: None)

    def _in_retried_transaction(
        self,
        conn: psycopg.Connection[Any],
        migration: Migration,
        record_step: Step | None,
        body: Callable[[], object],
        *,
        step: Step | None = None,
    ) -> None:
        """Run ``body`` in a transaction under lock_timeout, retried while its locks are not
        granted; record ``record_step`` in it, or (None) the migration's version."""

        def attempt() -> None:
            with conn.transaction():
                self.queries.set_step_lock_timeout(conn, self.lock_timeout)
                self.queries.lock_migrations(conn)
                body()
                if record_step is not None:
                    self.queries.record_migration_step(conn, migration.version, record_step.number)
                else:
                    self.queries.record_migration(conn, migration)
                    self.queries.clear_migration_steps(conn, migration.version)

        self._retrying(conn, migration, step, attempt)

    def _retried(
        self, conn: psycopg.Connection[Any], migration: Migration, step: Step, body: Any
    ) -> None:
        """``body`` in a transaction under lock_timeout (and the migration lock), retried."""

        def attempt() -> None:
            with conn.transaction():
                self.queries.set_step_lock_timeout(conn, self.lock_timeout)
                self.queries.lock_migrations(conn)
                body()

        self._retrying(conn, migration, step, attempt)

    def _retrying(
        self,
        conn: psycopg.Connection[Any],
        migration: Migration,
        step: Step | None,
        attempt: Callable[[], None],
    ) -> None:
        started = time.monotonic()
        tries = 0
        while True:
            try:
                attempt()
                return
            except _RETRIED as error:
                tries += 1
                elapsed = time.monotonic() - started
                where = f"migration {migration.label}" + (f" step {step.number}" if step else "")
                if elapsed >= self.lock_retry_for:
                    raise self._lock_error(conn, migration, step, where, tries, error) from None
                pause = min(MAX_RETRY_PAUSE, self.lock_timeout * 2 ** min(tries, 10))
                pause *= random.uniform(0.5, 1.0)  # noqa: S311 - spreading retries only
                pause = min(pause, max(0.0, self.lock_retry_for - elapsed))
                logger.log(
                    logging.INFO if tries < 3 else logging.WARNING,
                    "%s: %s (try %d); trying again in %.2f s",
                    where,
                    "a lock was not granted within lock_timeout"
                    if isinstance(error, pg_errors.LockNotAvailable)
                    else "deadlock",
                    tries,
                    pause,
                )
                self._sleep(pause)

    def _lock_error(
        self,
        conn: psycopg.Connection[Any],
        migration: Migration,
        step: Step | None,
        where: str,
        tries: int,
        error: Exception,
    ) -> MigrationLockError:
        relations = sorted(
            {
                lock.relation
                for statement in plan_migrations([migration]).get(
                    (migration.version, step.number if step else 0), ()
                )
                for lock in statement.locks
            }
            | {"jobs"}
        )
        try:
            holders = self.queries.get_lock_holders(conn, relations)
        except psycopg.Error:
            holders = []
        who = "; ".join(
            f"pid {row['pid']} ({row['application_name'] or 'no application_name'},"
            f" {row['state']}, {row['mode']}"
            + (
                f", transaction open {row['transaction_seconds']:.0f} s"
                if row["transaction_seconds"] is not None
                else ""
            )
            + f": {' '.join(str(row['query'] or '').split())[:80]})"
            for row in holders
        )
        return MigrationLockError(
            f"{where} did not get its locks in {tries} tries over {self.lock_retry_for:g} s"
            f" (lock_timeout {self.lock_timeout:g} s each; last: {error.__class__.__name__}):"
            f" {who or 'no session holds a lock on ' + ', '.join(relations) + ' now'}."
            " End or shorten those transactions, or run migrate again with a longer"
            " --lock-retry-for; steps done so far are kept"
        )

    def _run_concurrently(
        self, conn: psycopg.Connection[Any], migration: Migration, step: Step
    ) -> None:
        store = self.queries
        name = step.index_name()
        state = store.get_index_state(conn, name)
        if step.builds_index and partition_indexes.partitioned_table(store, conn, step.text):
            if state is not True:  # built partition by partition (partition_indexes.py)
                partition_indexes.build(
                    store, conn, step.text, lambda body: self._retried(conn, migration, step, body)
                )
            return
        if step.builds_index:
            if state is True:
                logger.info(
                    "migration %s step %d: index %s exists and is valid (built by an earlier"
                    " run); kept",
                    migration.label,
                    step.number,
                    name,
                )
                return
            if state is False:
                logger.warning(
                    "migration %s step %d: index %s was left invalid by a build that did not"
                    " finish; dropping it (concurrently) and building it again",
                    migration.label,
                    step.number,
                    name,
                )
                store.run_migration_sql(
                    conn, f"DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.{name}"
                )
        elif state is None:
            return  # dropped or rebuilt already: nothing to do
        store.run_migration_sql(conn, step.text)

    def _run_batched(self, conn: psycopg.Connection[Any], migration: Migration, step: Step) -> None:
        store = self.queries
        bounds = store.get_id_range(conn, step.table_name())
        if bounds is None:
            return
        start, high = bounds
        batches = 0
        changed: list[int] = []
        while start <= high:
            params = {"start": start, "stop": start + step.size}
            self._retrying(
                conn,
                migration,
                step,
                functools.partial(self._one_batch, conn, step, params, changed),
            )
            batches += 1
            start += step.size
            if start > high:  # rows added meanwhile: walk on to the highest id now
                latest = store.get_id_range(conn, step.table_name())
                high = latest[1] if latest is not None else high
        logger.info(
            "migration %s step %d: %d batch(es) of %d ids of %s, %d row(s) changed",
            migration.label,
            step.number,
            batches,
            step.size,
            step.table,
            sum(changed),
        )

    def _one_batch(
        self, conn: psycopg.Connection[Any], step: Step, params: dict[str, int], changed: list[int]
    ) -> None:
        """One batch of a batched step in its transaction; appends the rows it changed."""
        with conn.transaction():
            self.queries.set_step_lock_timeout(conn, self.lock_timeout)
            count = self.queries.run_migration_sql(conn, step.text, params)
        changed.append(count)

    def check(self, version: int) -> None:
        """Raise unless ``version`` (read from the database) is this code's head."""
        check_version(self.queries.schema, version)


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
