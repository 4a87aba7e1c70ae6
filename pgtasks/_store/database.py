"""Database: one App's connections — the DSN (the embedded server on demand), the sync
and async pools, the schema-version check, and operations retried on broken connections.

The App (settings, registry, client API) owns one; the handles, results, operations and
schedules use it through ``app.database``. Worker and beat services open connections of
their own (never the pool: a task that leaks pooled connections cannot stop them).
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import tenacity
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from .._embedded import embedded_dsn
from .._errors import PoolExhaustedError
from ..sql import Migration
from . import db
from .migrate import Migrator, check_version
from .store import Store

T = TypeVar("T")

#: Every Database of this process, so that a forked child can let go of what it inherited.
_databases: weakref.WeakSet[Database] = weakref.WeakSet()
#: In a forked child: the parent's pools, kept (never used, closed or garbage-collected,
#: whose finalizers would act on the parent's connections).
_inherited: list[object] = []


def _forget_inherited_pools() -> None:
    """``os.fork()`` hook (child side): drop the parent's pools without closing them.

    Their sockets are the parent's sessions: closing or using them from the child would
    break the parent. The child's first query opens pools of its own.
    """
    for database in list(_databases):
        _inherited.extend(pool for pool in (database._pool, database._apool) if pool is not None)
        database._lock = threading.Lock()  # another thread may have held it during the fork
        database._pool, database._pool_pid = None, 0
        database._apool, database._apool_loop = None, None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited_pools)


def is_connection_failure(error: BaseException) -> bool:
    """Errors worth a retry on a fresh connection: the connection broke, not the query."""
    if not isinstance(error, psycopg.OperationalError) or isinstance(error, PoolTimeout):
        return False
    state = error.sqlstate
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


class Database:
    """The connections of one App (``configured_dsn`` None: the embedded server)."""

    def __init__(
        self,
        store: Store,
        configured_dsn: str | None,
        embedded_dir: Path,
        *,
        pool_min_size: int,
        pool_max_size: int,
        connect_timeout: float,
        connect_attempts: int,
    ) -> None:
        self.store = store
        self.configured_dsn = configured_dsn
        self.embedded_dir = embedded_dir
        self.pool_min_size = pool_min_size
        self.pool_max_size = pool_max_size
        self.connect_timeout = connect_timeout
        self.connect_attempts = connect_attempts
        self._lock = threading.Lock()
        self._dsn: str | None = configured_dsn
        self._pool: ConnectionPool[Any] | None = None
        self._pool_pid = 0
        self._apool: AsyncConnectionPool[Any] | None = None
        self._apool_loop: asyncio.AbstractEventLoop | None = None
        #: The schema's version was found current (checked once, on first use).
        self.schema_checked = False
        _databases.add(self)

    @property
    def dsn(self) -> str:
        """The DSN in use; starts the embedded server when none is configured."""
        if self._dsn is None:
            self._dsn = embedded_dsn(self.embedded_dir)
        return self._dsn

    def describe(self) -> str:
        """Where the connections go, for logs (never the password)."""
        return db.describe_dsn(self.dsn)

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
                min_size=self.pool_min_size,
                max_size=self.pool_max_size,
                kwargs=db.pool_kwargs(),
                # READ COMMITTED whatever the database or role default (pin_isolation).
                configure=self.store.pin_isolation,
                timeout=self.connect_timeout,
                name=f"pgtasks-{self.store.schema}",
                open=False,
            )
            try:
                # Wait for the first connection(s): a first request that had to wait
                # would make the pool open one more connection at once, and a one-by-one
                # producer would then alternate between two server processes for the
                # pool's max_idle (about 20 µs more per enqueue).
                pool.open(wait=True, timeout=self.connect_timeout)
            except PoolTimeout as error:  # the pool closed itself
                timeout: PoolTimeout | None = error
            else:
                timeout = None
                self._pool, self._pool_pid = pool, pid
        if timeout is not None:
            raise self.unavailable(timeout) from None
        return pool

    async def get_apool(self) -> AsyncConnectionPool[Any]:
        """The async pool of the running event loop (one loop at a time)."""
        loop = asyncio.get_running_loop()
        if self._apool is None or self._apool_loop is not loop:
            apool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                self.dsn,
                min_size=self.pool_min_size,
                max_size=self.pool_max_size,
                kwargs=db.pool_kwargs(),
                configure=self.store.apin_isolation,
                timeout=self.connect_timeout,
                name=f"pgtasks-{self.store.schema}-async",
                open=False,
            )
            try:
                # Waiting for the first connection keeps no connection attempt running in
                # the background when a short-lived loop (asyncio.run) ends.
                await apool.open(wait=True, timeout=self.connect_timeout)
            except PoolTimeout as error:
                await apool.close()
                raise self.unavailable(error) from None
            self._apool, self._apool_loop = apool, loop
        return self._apool

    def unavailable(self, cause: BaseException | None) -> Exception:
        """The error to raise when no connection could be had: the server is down or
        unreachable (DatabaseUnavailableError), or the pool is exhausted."""
        if isinstance(cause, PoolTimeout) or cause is None:
            probed = db.probe_connection_error(self.dsn, self.connect_timeout)
            if probed is None and isinstance(cause, PoolTimeout):
                # The server answers: the pool is exhausted, not the database down.
                return PoolExhaustedError(
                    f"no free connection in this process's pool within"
                    f" {self.connect_timeout:g} s: all {self.pool_max_size} (pool_max_size)"
                    " are in use. Is a task or caller holding connections (a leaked or"
                    f" long transaction)? The server at {self.describe()} is reachable."
                )
            cause = probed or cause
        return db.unavailable_error(self.dsn, cause, self.connect_timeout)

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection (autocommit) with the schema checked."""
        pool = self.get_pool()
        try:
            connection_context = pool.connection(timeout=self.connect_timeout)
            conn = connection_context.__enter__()
        except PoolTimeout as error:
            raise self.unavailable(error) from None
        try:
            self.check_schema(conn)
            yield conn
        except BaseException as error:
            if not connection_context.__exit__(type(error), error, error.__traceback__):
                raise
        else:
            connection_context.__exit__(None, None, None)

    @asynccontextmanager
    async def aconnection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        pool = await self.get_apool()
        try:
            connection_context = pool.connection(timeout=self.connect_timeout)
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
    def _retrying(self) -> dict[str, Any]:
        """Retries after the first failed try: connect_attempts - 1 more, backing off."""
        return {
            "stop": tenacity.stop_after_attempt(self.connect_attempts - 1),
            "wait": tenacity.wait_exponential(multiplier=0.1, max=2.0),
            "retry": tenacity.retry_if_exception(is_connection_failure),
            "reraise": True,
        }

    def _first_try_failed(self, error: psycopg.OperationalError) -> None:
        """Re-raise ``error`` unless it is worth retrying on a fresh connection."""
        if not is_connection_failure(error):
            raise error
        if self.connect_attempts < 2:
            raise self.unavailable(error) from None

    def run(self, operation: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run ``operation`` on a pooled connection, retrying broken connections."""

        def attempt() -> T:
            # What ``with self.connection()`` does, without its two generator context
            # managers: a one-job enqueue pays for every microsecond spent here.
            pool = self._pool
            if pool is None or self._pool_pid != os.getpid():
                pool = self.get_pool()
            try:
                conn = pool.getconn(timeout=self.connect_timeout)
            except PoolTimeout as error:
                raise self.unavailable(error) from None
            try:
                # Commits (or rolls back) what is left open, as pool.connection() does:
                # a pooled connection may have been taken out of autocommit by its user.
                with conn:
                    if not self.schema_checked:
                        self.check_schema(conn)
                    return operation(conn)
            finally:
                pool.putconn(conn)  # replaces a broken connection

        try:
            # The first try goes without tenacity: building its machinery costs more than
            # the round trip of a one-job enqueue. Broken connections retry through it.
            return attempt()
        except psycopg.OperationalError as error:
            self._first_try_failed(error)
        try:
            return tenacity.Retrying(**self._retrying())(attempt)
        except psycopg.OperationalError as error:
            if is_connection_failure(error):
                raise self.unavailable(error) from None
            raise

    async def arun(self, operation: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]) -> T:
        """The async twin of :meth:`run`."""

        async def attempt() -> T:
            async with self.aconnection() as conn:
                return await operation(conn)

        try:
            return await attempt()  # as in run(): the first try without tenacity
        except psycopg.OperationalError as error:
            self._first_try_failed(error)
        try:
            return await tenacity.AsyncRetrying(**self._retrying())(attempt)
        except psycopg.OperationalError as error:
            if is_connection_failure(error):
                raise self.unavailable(error) from None
            raise

    # -- schema --
    def check_schema(self, conn: psycopg.Connection[Any]) -> None:
        """SchemaNotMigratedError / SchemaTooNewError unless the schema is current (once)."""
        if not self.schema_checked:
            check_version(self.store.schema, self.store.get_schema_version(conn))
            self.schema_checked = True

    async def acheck_schema(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if not self.schema_checked:
            check_version(self.store.schema, await self.store.aget_schema_version(conn))
            self.schema_checked = True

    def migrate(self) -> list[Migration]:
        """Create or upgrade the schema; safe to run concurrently and repeatedly."""
        pool = self.get_pool()
        try:
            with pool.connection(timeout=self.connect_timeout) as conn:
                applied = Migrator(self.store).migrate(conn)
                check_version(self.store.schema, self.store.get_schema_version(conn))
        except PoolTimeout as error:
            raise self.unavailable(error) from None
        self.schema_checked = True
        return applied

    # -- lifetime --
    def close(self) -> None:
        """Close this process's pools (the async one only from outside its own loop)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pool_pid == os.getpid():
            pool.close()
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
