"""Database: one App's connections — the DSN (the embedded server on demand), the sync
and async pools, the schema-version check, and operations retried on broken connections.

The App (settings, registry, client API) owns one; the handles, results, operations and
schedules use it through ``app.database``. Worker and beat services open connections of
their own (never the pool: a task that leaks pooled connections cannot stop them), with
:meth:`Database.connect`.

Three kinds of connection, each to its own DSN:

- ``dsn``: everything by default; with ``pooled``, a transaction-mode pooler (PgBouncer):
  claims, finishes, enqueues, transaction-level advisory locks, ``set_config(..., true)``
  and NOTIFY work through it; startup options and (below PgBouncer 1.21) prepared
  statements do not, so none are used on it.
- the session DSN (``session_dsn``, else ``dsn`` when it is not pooled): what needs a
  server session of its own: LISTEN, the beat and pruner session locks, migrations.
  A pooled ``dsn`` without ``session_dsn`` has none: pgtasks then polls.
- ``replica_dsn``: reads that may lag (the dashboard, stats, the jobs list, metrics;
  :meth:`Database.read`), never a read of the app's own writes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar, cast

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from .._dsn import describe_dsn, redact_for
from .._embedded import embedded_dsn
from .._errors import ConfigurationError, PoolExhaustedError
from ..sql import Migration
from . import connecting, forks, opening
from .error_kinds import (
    arollback_left_open,
    is_connection_failure,
    is_recovery_conflict,
    left_open,
    rollback_left_open,
)
from .migrator import (
    DEFAULT_LOCK_RETRY_FOR,
    DEFAULT_LOCK_TIMEOUT,
    MigrationPlan,
    Migrator,
    check_version,
)
from .queries import Queries

T = TypeVar("T")

logger = logging.getLogger("pgtasks")

#: Connections of the replica pool, per process (dashboard pages, stats, metrics).
REPLICA_POOL_MAX = 4
#: Seconds between two log lines saying that replica reads fall back to the primary.
REPLICA_FALLBACK_LOG_INTERVAL = 60.0
#: Tries of a replica read cancelled by a conflict with recovery before the primary serves it.
REPLICA_CONFLICT_TRIES = 2
#: Seconds replica reads go to the primary after the replica could not be reached.
REPLICA_RETRY_AFTER = 30.0


class Database:
    """The connections of one store: where they go (``settings``: ``dsn`` None is the
    embedded server; a ``session_dsn`` for a pooled dsn, a ``replica_dsn``) and the pools
    (``pools``). ``store`` holds the schema's statements (rendered for
    ``settings.schema`` when not given); ``connection_kwargs``: further psycopg.connect()
    arguments of the pooled and replica connections (options never go to a pooled dsn);
    ``name``: the pools' name (pgtasks-<schema> by default).
    """

    def __init__(
        self,
        settings: connecting.DatabaseSettings,
        pools: connecting.PoolSettings,
        *,
        queries: Queries | None = None,
        connection_kwargs: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        self.settings = settings
        self.pools = pools
        self.queries = queries or Queries(
            settings.schema, notify=settings.notify, notify_interval=settings.notify_interval
        )
        self.extra_kwargs = dict(connection_kwargs or {})
        self.name = name or f"pgtasks-{settings.schema}"
        self.configured_dsn = settings.dsn
        self.embedded_dir = settings.embedded_dir
        self.configured_session_dsn = settings.session_dsn or None
        self.replica_dsn = settings.replica_dsn or None
        #: ``dsn`` goes through a transaction-mode pooler (PgBouncer pool_mode=transaction).
        self.pooled = (
            bool(settings.session_dsn) if settings.pooled is None else bool(settings.pooled)
        )
        #: Connections to ``dsn`` may prepare statements (psycopg's prepare_threshold).
        self.prepared_statements = (
            not self.pooled
            if settings.prepared_statements is None
            else bool(settings.prepared_statements)
        )
        self._lock = threading.Lock()
        self._dsn: str | None = settings.dsn
        self._pool: ConnectionPool[Any] | None = None
        self._pool_pid = 0
        self._apool: AsyncConnectionPool[Any] | None = None
        self._apool_loop: asyncio.AbstractEventLoop | None = None
        self._replica_pool: ConnectionPool[Any] | None = None
        self._replica_pid = 0
        self._replica_fallback_logged = 0.0
        self._replica_down_until = 0.0
        #: The schema's version was found current (checked once, on first use).
        self.schema_checked = False
        forks.track(self)

    @property
    def dsn(self) -> str:
        """The DSN in use; starts the embedded server when none is configured."""
        if self._dsn is None:
            self._dsn = embedded_dsn(self.embedded_dir)
        return self._dsn

    @property
    def session_dsn(self) -> str | None:
        """Where session-scoped work connects: ``session_dsn``, else ``dsn`` unless it is
        pooled (None: there is no such connection, pgtasks polls)."""
        if self.configured_session_dsn:
            return self.configured_session_dsn
        return None if self.pooled else self.dsn

    @property
    def has_session(self) -> bool:
        """Whether LISTEN, session locks and migrations have a connection to use."""
        return bool(self.configured_session_dsn) or not self.pooled

    def describe(self) -> str:
        """Where the connections go, for logs (never the password)."""
        where = describe_dsn(self.dsn)
        if self.pooled:
            session = self.configured_session_dsn
            sessions = describe_dsn(session) if session else "none, polling"
            where += f" (pooled; sessions: {sessions})"
        if self.replica_dsn:
            where += f" (replica: {describe_dsn(self.replica_dsn)})"
        return where

    def connection_kwargs(self, *, session: bool = False) -> dict[str, Any]:
        """Keyword arguments of psycopg.connect for a pooled connection to ``dsn`` (or the
        session DSN): the extra arguments given, without startup options when ``dsn`` is a
        transaction pooler (it refuses them), and no prepared statements where the pooler
        cannot hold them. A direct connection's options pin READ COMMITTED (pin_isolation)."""
        kwargs = dict(self.extra_kwargs)
        if self.pooled and not session:
            kwargs.pop("options", None)
        else:
            kwargs["options"] = connecting.pinned_options(kwargs.get("options"), self.dsn)
        if not session and not self.prepared_statements:
            kwargs["prepare_threshold"] = None
        return kwargs

    #: READ COMMITTED on a pooled connection, per transaction (see connecting.pin_isolation).
    pin_isolation, apin_isolation = (
        staticmethod(connecting.pin_isolation),
        staticmethod(connecting.apin_isolation),
    )

    def connect(
        self,
        *,
        session: bool = False,
        replica: bool = False,
        options: str | None = None,
        **kwargs: Any,
    ) -> psycopg.Connection[Any]:
        """A new connection of its own (autocommit unless ``autocommit=False``) to ``dsn``,
        the session DSN (``session``) or the replica (``replica``), READ COMMITTED whatever
        the server's default (connecting.pin_isolation).

        ``options`` (libpq startup options, ``-c name=value``) are sent on direct
        connections only: a transaction pooler refuses them (PgBouncer before 1.20) or
        cannot keep them per client. ConfigurationError when ``session`` is asked of a
        pooled ``dsn`` without ``session_dsn``.
        """
        if replica:
            target = self.replica_dsn or self.dsn
            direct = bool(self.replica_dsn) or not self.pooled
            extra = {} if self.replica_dsn else self.connection_kwargs()
        elif session:
            target_or_none = self.session_dsn
            if target_or_none is None:
                raise ConfigurationError(
                    f"{describe_dsn(self.dsn)} goes through a transaction pooler and no"
                    " session_dsn is set: session-scoped work (LISTEN, session locks,"
                    " migrations) needs a direct connection. Set App(session_dsn=...) or"
                    " PGTASKS_SESSION_DSN"
                )
            target, direct, extra = target_or_none, True, {}
        else:
            target, direct, extra = self.dsn, not self.pooled, self.connection_kwargs()
        if direct and (options or "options" not in extra):  # the caller's replace the App's
            extra["options"] = connecting.pinned_options(options, target)  # pinned either way
        kwargs.setdefault("autocommit", True)
        kwargs.setdefault("connect_timeout", max(1, round(self.pools.connect_timeout)))
        conn = psycopg.connect(target, **{**extra, **kwargs})
        if not direct:
            self.pin_isolation(conn)
        return conn

    # -- pools --
    def get_pool(self) -> ConnectionPool[Any]:
        """This process's pool, opened on first use (a pool inherited through fork() is
        the parent's: never reused or closed)."""
        with self._lock:
            pid = os.getpid()
            if self._pool is not None and self._pool_pid == pid:
                return self._pool
            pool: ConnectionPool[Any] = ConnectionPool(
                self.dsn,
                # READ COMMITTED whatever the database or role default (see pin_isolation).
                configure=self.pin_isolation if self.pooled else None,
                name=self.name,
                **connecting.pool_options(self.pools, self.connection_kwargs()),
            )
            # Wait for the first connection(s): a first request that had to wait would
            # make the pool open one more connection at once, and a one-by-one producer
            # would then alternate between two server processes for the pool's max_idle
            # (about 20 µs more per enqueue). A server that refuses: at once (opening.py).
            failed = opening.open_pool(pool, self.pools.connect_timeout, self._probe)
            if failed is None:
                self._pool, self._pool_pid = pool, pid
        if failed is not None:
            raise self.unavailable(failed) from None
        return pool

    async def get_apool(self) -> AsyncConnectionPool[Any]:
        """The async pool of the running event loop (one loop at a time)."""
        loop = asyncio.get_running_loop()
        if self._apool is None or self._apool_loop is not loop:
            apool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                self.dsn,
                configure=self.apin_isolation if self.pooled else None,
                name=f"{self.name}-async",
                **connecting.pool_options(self.pools, self.connection_kwargs()),
            )
            # Waiting for the first connection keeps no connection attempt running in
            # the background when a short-lived loop (asyncio.run) ends.
            failed = await opening.aopen_pool(apool, self.pools.connect_timeout, self._probe)
            if failed is not None:
                raise self.unavailable(failed) from None
            self._apool, self._apool_loop = apool, loop
        return self._apool

    def unavailable(self, cause: BaseException | None) -> Exception:
        """The error to raise when no connection could be had: the server is down or
        unreachable (DatabaseUnavailableError), or the pool is exhausted."""
        cause = cause.cause if isinstance(cause, opening.Refused) else cause
        if isinstance(cause, PoolTimeout) or cause is None:
            probed = self._probe()
            if probed is None and isinstance(cause, PoolTimeout):
                # The server answers: the pool is exhausted, not the database down.
                return PoolExhaustedError(
                    f"no free connection in this process's pool within"
                    f" {self.pools.connect_timeout:g} s: all {self.pools.max_size} (pool_max_size)"
                    " are in use. Is a task or caller holding connections (a leaked or"
                    f" long transaction)? The server at {self.describe()} is reachable."
                )
            cause = probed or cause
        if cause is not None and connecting.refuses_startup_options(cause):
            return connecting.startup_options_refused(self.dsn, cause)
        return connecting.unavailable_error(self.dsn, cause, self.pools.connect_timeout)

    def _probe(self) -> BaseException | None:
        """One direct connection, as the pool makes them: its error, None when it worked."""
        return connecting.probe_connection_error(
            self.dsn, self.pools.connect_timeout, self.connection_kwargs()
        )

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection (autocommit) with the schema checked."""
        pool, conn = self._getconn()
        try:
            self.check_schema(conn)
            yield conn
        except BaseException:
            rollback_left_open(conn)
            raise
        else:
            if left_open(conn):  # as pool.connection() does
                conn.commit()
        finally:
            pool.putconn(conn)

    def _getconn(self) -> tuple[ConnectionPool[Any], psycopg.Connection[Any]]:
        """A connection of this process's pool, and that pool (opening.take: a pool that
        lags a server that is back is replaced)."""
        try:
            timeout = self.pools.connect_timeout
            return opening.take(self._current_pool, self._renew_pool, timeout, self._probe)
        except PoolTimeout as error:
            raise self.unavailable(error) from None

    def _current_pool(self) -> ConnectionPool[Any]:
        pool = self._pool
        return pool if pool is not None and self._pool_pid == os.getpid() else self.get_pool()

    def _renew_pool(self, stale: ConnectionPool[Any]) -> ConnectionPool[Any]:
        with self._lock:
            retired = self._pool is stale and self._pool_pid == os.getpid()
            if retired:
                self._pool = None
        if retired:
            opening.retire(stale)
        return self.get_pool()

    @asynccontextmanager
    async def aconnection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        pool = await self.get_apool()
        try:
            connection_context = pool.connection(timeout=self.pools.connect_timeout)
            conn = await connection_context.__aenter__()
        except PoolTimeout as error:
            raise self.unavailable(error) from None
        try:
            await self.acheck_schema(conn)
            yield conn
        except BaseException as error:
            if not await connection_context.__aexit__(type(error), error, error.__traceback__):
                raise
        else:
            await connection_context.__aexit__(None, None, None)

    # -- retried operations --
    def _retrying(self, asynchronous: bool = False) -> Any:
        """Retries after the first failed try: connect_attempts - 1 more, backing off."""
        import tenacity  # on the first broken connection, not at every process's start

        return (tenacity.AsyncRetrying if asynchronous else tenacity.Retrying)(
            stop=tenacity.stop_after_attempt(self.pools.connect_attempts - 1),
            wait=tenacity.wait_exponential(multiplier=0.1, max=2.0),
            retry=tenacity.retry_if_exception(is_connection_failure),
            reraise=True,
        )

    def _first_try_failed(self, error: psycopg.OperationalError) -> None:
        """Re-raise ``error`` unless it is worth retrying on a fresh connection."""
        if not is_connection_failure(error):
            raise error
        if self.pools.connect_attempts < 2:
            raise self.unavailable(error) from None

    def run(self, operation: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run ``operation`` on a pooled connection, retrying broken connections."""

        def attempt() -> T:
            # What ``with self.connection()`` does, without its generator context
            # manager: a one-job enqueue pays for every microsecond spent here.
            pool, conn = self._getconn()
            try:
                try:
                    if not self.schema_checked:
                        self.check_schema(conn)
                    result = operation(conn)
                except BaseException:
                    rollback_left_open(conn)
                    raise
                # Commits what is left open, as pool.connection() does (a pooled connection
                # may have been taken out of autocommit by its user), without its call when
                # nothing is (an autocommit statement).
                if left_open(conn):
                    conn.commit()
                return result
            except psycopg.Error as error:
                if connecting.lost_prepared_statement(error):
                    raise connecting.pooler_error(self.dsn, error, declared=self.pooled) from error
                raise
            finally:
                pool.putconn(conn)  # replaces a broken connection

        try:
            # The first try goes without tenacity: building its machinery costs more than
            # the round trip of a one-job enqueue. Broken connections retry through it.
            return attempt()
        except psycopg.OperationalError as error:
            self._first_try_failed(error)
        try:
            return cast(T, self._retrying()(attempt))
        except psycopg.OperationalError as error:
            if is_connection_failure(error):
                raise self.unavailable(error) from None
            raise

    async def _agetconn(self) -> tuple[AsyncConnectionPool[Any], psycopg.AsyncConnection[Any]]:
        """:meth:`_getconn` of the async pool of the running loop."""
        apool = self._apool
        if apool is None or self._apool_loop is not asyncio.get_running_loop():
            apool = await self.get_apool()
        timeout = self.pools.connect_timeout
        try:
            try:
                return apool, await opening.agetconn(apool, timeout, self._probe)
            except opening.Behind:  # its attempts back off: a new pool (opening.take)
                if self._apool is apool:
                    self._apool = None
                    await apool.close(timeout=0)
                apool = await self.get_apool()
                return apool, await opening.agetconn(apool, timeout, self._probe)
        except PoolTimeout as error:
            raise self.unavailable(error) from None

    async def arun(self, operation: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]) -> T:
        """The async twin of :meth:`run`."""

        async def attempt() -> T:
            # What ``async with self.aconnection()`` does, without its two async generator
            # context managers (as in run()): an asyncio program's one-job enqueue pays
            # for every microsecond spent here.
            apool, conn = await self._agetconn()
            try:
                try:
                    if not self.schema_checked:
                        await self.acheck_schema(conn)
                    result = await operation(conn)
                except BaseException:
                    await arollback_left_open(conn)
                    raise
                if left_open(conn):
                    await conn.commit()
                return result
            except psycopg.Error as error:
                if connecting.lost_prepared_statement(error):
                    raise connecting.pooler_error(self.dsn, error, declared=self.pooled) from error
                raise
            finally:
                await apool.putconn(conn)

        try:
            return await attempt()  # as in run(): the first try without tenacity
        except psycopg.OperationalError as error:
            self._first_try_failed(error)
        try:
            return cast(T, await self._retrying(asynchronous=True)(attempt))
        except psycopg.OperationalError as error:
            if is_connection_failure(error):
                raise self.unavailable(error) from None
            raise

    # -- schema --
    def check_schema(self, conn: psycopg.Connection[Any]) -> None:
        """SchemaNotMigratedError / SchemaTooNewError unless the schema is current (once)."""
        if not self.schema_checked:
            check_version(self.queries.schema, self.queries.get_schema_version(conn))
            self.schema_checked = True

    async def acheck_schema(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if not self.schema_checked:
            check_version(self.queries.schema, await self.queries.aget_schema_version(conn))
            self.schema_checked = True

    def _migration_connection(self) -> psycopg.Connection[Any]:
        """A direct connection of its own for the migrator (the session DSN)."""
        session_dsn = self.session_dsn
        if session_dsn is None:
            raise ConfigurationError(
                f"pgtasks migrate needs a direct connection, and {describe_dsn(self.dsn)}"
                " goes through a transaction pooler: set App(session_dsn=...) or"
                " PGTASKS_SESSION_DSN to the server itself"
            )
        try:
            return self.connect(session=True, application_name="pgtasks migrate")
        except psycopg.OperationalError as error:
            raise connecting.unavailable_error(
                session_dsn, error, self.pools.connect_timeout
            ) from None

    def migrate(
        self,
        *,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        lock_retry_for: float = DEFAULT_LOCK_RETRY_FOR,
    ) -> list[Migration]:
        """Create or upgrade the schema online; safe to run concurrently and repeatedly."""
        migrator = Migrator(self.queries, lock_timeout=lock_timeout, lock_retry_for=lock_retry_for)

        def at_head(conn: psycopg.Connection[Any]) -> None:  # online, the migration lock held
            check_version(self.queries.schema, self.queries.get_schema_version(conn))
            self.queries.prepare_history_days(conn)  # jobs_history's first days (and the pruner)
            self.queries.settle_runtime_limits_trigger(conn)  # off while no such limit

        with self._migration_connection() as conn:
            applied = migrator.migrate(conn, while_locked=at_head)
            check_version(self.queries.schema, self.queries.get_schema_version(conn))
        self.schema_checked = True
        return applied

    def migration_plan(
        self,
        *,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        lock_retry_for: float = DEFAULT_LOCK_RETRY_FOR,
    ) -> MigrationPlan:
        """What :meth:`migrate` would do now (read only)."""
        migrator = Migrator(self.queries, lock_timeout=lock_timeout, lock_retry_for=lock_retry_for)
        with self._migration_connection() as conn:
            return migrator.plan(conn)

    # -- the replica --
    def get_replica_pool(self) -> ConnectionPool[Any]:
        """This process's pool of replica connections (opened on first use)."""
        replica_dsn = self.replica_dsn
        if replica_dsn is None:
            raise ConfigurationError("no replica_dsn is set")
        with self._lock:
            pid = os.getpid()
            if self._replica_pool is not None and self._replica_pid == pid:
                return self._replica_pool
            pool: ConnectionPool[Any] = ConnectionPool(
                replica_dsn,
                min_size=0,
                max_size=REPLICA_POOL_MAX,
                kwargs={
                    **connecting.pool_kwargs(),
                    "application_name": "pgtasks replica reads",
                    **self.extra_kwargs,
                    "options": connecting.pinned_options(
                        self.extra_kwargs.get("options"), replica_dsn
                    ),
                },
                timeout=self.pools.connect_timeout,
                name=f"{self.name}-replica",
                open=True,
            )
            self._replica_pool, self._replica_pid = pool, pid
            return pool

    def read(self, operation: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run a read that may lag behind the primary: on the replica when one is set,
        else like :meth:`run`. Never for what must see the app's own writes (``get()``).

        A query the replica cancels to apply WAL (hot_standby_feedback off) is tried
        again. A replica that cannot be reached (or keeps cancelling) hands the read to
        the primary, and so do the reads of the next REPLICA_RETRY_AFTER seconds (each
        would wait connect_timeout for it); logged at most once a minute.
        """
        if not self.replica_dsn or time.monotonic() < self._replica_down_until:
            return self.run(operation)
        cause: BaseException | None = None
        for _ in range(REPLICA_CONFLICT_TRIES):
            try:
                with self.get_replica_pool().connection(timeout=self.pools.connect_timeout) as conn:
                    return operation(conn)
            except (psycopg.Error, PoolTimeout) as error:
                cause = error
                if is_recovery_conflict(error):
                    continue
                if not isinstance(error, PoolTimeout) and not is_connection_failure(error):
                    raise
                self._replica_down_until = time.monotonic() + REPLICA_RETRY_AFTER
                break
        now = time.monotonic()
        if now - self._replica_fallback_logged >= REPLICA_FALLBACK_LOG_INTERVAL:
            self._replica_fallback_logged = now
            logger.warning(
                "replica %s could not serve a read (%s); reading from the primary",
                describe_dsn(self.replica_dsn),
                redact_for(self.replica_dsn, str(cause)),
            )
        return self.run(operation)

    # -- lifetime --
    def close(self) -> None:
        """Close this process's pools (the async one only from outside its own loop)."""
        with self._lock:
            pool, self._pool = self._pool, None
            replica, self._replica_pool = self._replica_pool, None
        if pool is not None and self._pool_pid == os.getpid():
            pool.close()
        if replica is not None and self._replica_pid == os.getpid():
            replica.close()
        apool, self._apool = self._apool, None
        if apool is not None:
            loop = self._apool_loop
            self._apool_loop = None
            if loop is not None and not loop.is_closed() and not loop.is_running():
                loop.run_until_complete(apool.close())

    async def aclose(self) -> None:
        apool, self._apool = self._apool, None
        self._apool_loop = None
        if apool is not None:
            await apool.close()
        self.close()
