"""App: configuration, the task registry, connection pools and the enqueue paths."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import re
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar, overload

import psycopg
import tenacity
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout
from typing_extensions import Concatenate, ParamSpec, Self, Unpack  # noqa: UP035

from .._cron import PeriodicOptions, Schedule
from .._embedded import embedded_dsn
from .._errors import (
    ConfigurationError,
    JobNotFoundError,
    PoolExhaustedError,
    TaskRegistrationError,
    UnknownTaskError,
)
from .._jobs import CancelResult, InsertedJob, JobContext, JobRow, JobSpec
from .._operations import retention_seconds
from .._payload import DEFAULT_MAX_PAYLOAD_BYTES
from .._store import db as _db
from .._store.migrate import Migrator, check_version
from .._store.store import Store
from .._text import DEFAULT_MAX_ERROR_BYTES
from ..sql import Migration
from .eager import arun_eagerly, run_eagerly
from .handle import JobHandle
from .results import ResultListener
from .schedules import build_schedule
from .tasks import Task, TaskSettings

logger = logging.getLogger("pgtasks")

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
TaskT = TypeVar("TaskT", bound="Task[Any, Any]")

#: Schema names: letters, digits and underscores (any case, reserved words allowed).
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,47}$")

#: Rows per INSERT statement in bulk enqueues (several statements share one transaction).
BULK_CHUNK = 5000

#: Every App of this process, so that a forked child can let go of what it inherited.
_apps: weakref.WeakSet[App] = weakref.WeakSet()
#: In a forked child: the parent's pools and listeners, kept (never used, closed or
#: garbage-collected, whose finalizers would act on the parent's connections).
_inherited: list[object] = []


def _forget_inherited_connections() -> None:
    """``os.fork()`` hook (child side): drop the parent's pools without closing them.

    Their sockets are the parent's sessions: closing or using them from the child would
    break the parent. The child's first query opens pools of its own.
    """
    for app in list(_apps):
        _inherited.extend(
            resource for resource in (app._pool, app._apool, app._results) if resource is not None
        )
        app._lock = threading.Lock()  # another thread may have held it during the fork
        app._pool, app._pool_pid = None, 0
        app._apool, app._apool_loop = None, None
        app._results, app._results_pid = None, 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited_connections)


def validate_schema_name(schema: object) -> str:
    if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
        raise ConfigurationError(
            f"invalid schema name {schema!r}: use 1-48 letters, digits or underscores,"
            " not starting with a digit"
        )
    if schema.lower() in ("public", "information_schema"):
        raise ConfigurationError(
            f"invalid schema name {schema!r}: pgtasks keeps its tables in a schema of its own"
        )
    if schema.lower().startswith("pg_"):
        raise ConfigurationError(f"invalid schema name {schema!r}: the pg_ prefix is reserved")
    return schema


def _positive_seconds(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigurationError(f"{name}= must be a positive number of seconds, got {value!r}")
    return float(value)


def _is_connection_failure(error: BaseException) -> bool:
    """Errors worth a retry on a fresh connection: the connection broke, not the query."""
    if not isinstance(error, psycopg.OperationalError) or isinstance(error, PoolTimeout):
        return False
    state = error.sqlstate
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


class App:
    """A pgtasks application: tasks, configuration and the database connection.

    ``dsn`` resolution: ``App(dsn=...)`` > ``PGTASKS_DSN`` > ``DATABASE_URL`` > the
    embedded PostgreSQL in ``./.pgtasks`` (development only; needs ``pgtasks[embedded]``).
    ``schema``: ``App(schema=...)`` > ``PGTASKS_SCHEMA`` > ``"pgtasks"``.
    Pools are created on first use and closed by :meth:`close` or ``with app:``.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str | None = None,
        embedded_dir: str | os.PathLike[str] | None = None,
        default_queue: str = "default",
        default_max_attempts: int = 5,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        max_result_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        max_error_bytes: int = DEFAULT_MAX_ERROR_BYTES,
        pool_min_size: int = 1,
        pool_max_size: int = 10,
        connect_timeout: float = 5.0,
        connect_attempts: int = 3,
        lease_timeout: float = 30.0,
        heartbeat_interval: float = 5.0,
        rescue_interval: float = 5.0,
        poll_interval: float = 1.0,
        prune_done_after: float | None = 86400.0,
        prune_failed_after: float | None = 7 * 86400.0,
        prune_interval: float = 60.0,
        eager: bool = False,
    ) -> None:
        # An explicit schema="" is an error, not a request for the default.
        self.schema = validate_schema_name(
            schema if schema is not None else os.environ.get("PGTASKS_SCHEMA") or "pgtasks"
        )
        self._configured_dsn = _db.resolve_dsn(dsn)
        self.embedded_dir: Path = _db.embedded_data_dir(embedded_dir)
        if not isinstance(default_queue, str) or not default_queue:
            raise ConfigurationError(
                f"default_queue= must be a non-empty string, got {default_queue!r}"
            )
        self.default_queue = default_queue
        if (
            isinstance(default_max_attempts, bool)
            or not isinstance(default_max_attempts, int)
            or default_max_attempts < 1
        ):
            raise ConfigurationError(
                f"default_max_attempts= must be an int >= 1, got {default_max_attempts!r}"
            )
        self.default_max_attempts = default_max_attempts
        if not isinstance(max_payload_bytes, int) or max_payload_bytes < 64:
            raise ConfigurationError(
                f"max_payload_bytes= must be an int >= 64, got {max_payload_bytes!r}"
            )
        self.max_payload_bytes = max_payload_bytes
        # Caps of what a worker stores: a larger result fails its job, a longer error
        # text (last_error: message and traceback) is cut with a marker.
        caps = {"max_result_bytes": max_result_bytes, "max_error_bytes": max_error_bytes}
        for name, cap in caps.items():
            if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1024:
                raise ConfigurationError(f"{name}= must be an int >= 1024, got {cap!r}")
        self.max_result_bytes, self.max_error_bytes = max_result_bytes, max_error_bytes
        if not 0 <= pool_min_size <= pool_max_size or pool_max_size < 1:
            raise ConfigurationError(
                "need 0 <= pool_min_size <= pool_max_size and pool_max_size >= 1"
            )
        self.pool_min_size = pool_min_size
        self.pool_max_size = pool_max_size
        self.connect_timeout = _positive_seconds("connect_timeout", connect_timeout)
        if not isinstance(connect_attempts, int) or connect_attempts < 1:
            raise ConfigurationError(
                f"connect_attempts= must be an int >= 1, got {connect_attempts!r}"
            )
        self.connect_attempts = connect_attempts
        self.lease_timeout = _positive_seconds("lease_timeout", lease_timeout)
        self.heartbeat_interval = _positive_seconds("heartbeat_interval", heartbeat_interval)
        self.rescue_interval = _positive_seconds("rescue_interval", rescue_interval)
        self.poll_interval = _positive_seconds("poll_interval", poll_interval)
        # Retention of finished jobs in seconds (None: never pruned); cancelled jobs use
        # the failed retention. Workers prune every prune_interval seconds.
        self.prune_done_after = retention_seconds("prune_done_after", prune_done_after)
        self.prune_failed_after = retention_seconds("prune_failed_after", prune_failed_after)
        self.prune_interval = _positive_seconds("prune_interval", prune_interval)
        if self.heartbeat_interval >= self.lease_timeout:
            raise ConfigurationError(
                f"heartbeat_interval ({self.heartbeat_interval:g} s) must be shorter than"
                f" lease_timeout ({self.lease_timeout:g} s), or live workers would be rescued"
            )
        self.store = Store(self.schema)
        self.tasks: dict[str, Task[Any, Any]] = {}
        #: Periodic schedules by name (``@app.periodic``, ``app.add_periodic``).
        self.schedules: dict[str, Schedule] = {}
        self._lock = threading.Lock()
        self._dsn: str | None = None
        self._pool: ConnectionPool[Any] | None = None
        self._pool_pid = 0
        self._apool: AsyncConnectionPool[Any] | None = None
        self._apool_loop: asyncio.AbstractEventLoop | None = None
        self._schema_checked = False
        self._eager: contextvars.ContextVar[bool] = contextvars.ContextVar(
            f"pgtasks_eager_{id(self)}", default=eager
        )
        self._results: ResultListener | None = None
        self._results_pid = 0
        _apps.add(self)

    def __repr__(self) -> str:
        return f"<App schema={self.schema} tasks={len(self.tasks)}>"

    # -- configuration --
    @property
    def dsn(self) -> str:
        """The DSN in use; starts the embedded server when none is configured."""
        if self._dsn is None:
            self._dsn = self._configured_dsn or embedded_dsn(self.embedded_dir)
        return self._dsn

    @property
    def uses_embedded(self) -> bool:
        return self._configured_dsn is None

    def describe_database(self) -> str:
        """Where the app connects, for logs (never the password)."""
        return _db.describe_dsn(self.dsn)

    # -- tasks --
    @overload
    def task(self, function: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self, *, bind: Literal[True], **options: Unpack[TaskSettings]
    ) -> Callable[[Callable[Concatenate[JobContext, P], R]], Task[P, R]]: ...

    @overload
    def task(
        self, *, bind: Literal[False] = False, **options: Unpack[TaskSettings]
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(self, *functions: Callable[..., Any], bind: bool = False, **options: Any) -> Any:
        """Register a function as a task: ``@app.task`` or ``@app.task(queue=..., ...)``."""

        def register(function: Callable[..., Any]) -> Task[Any, Any]:
            if isinstance(function, Task):
                raise TaskRegistrationError(f"{function!r} is already a task")
            task: Task[Any, Any] = Task(self, function, bind=bind, **options)
            with self._lock:
                if task.name in self.tasks:
                    raise TaskRegistrationError(
                        f"a task named {task.name!r} is already registered; pass name= to"
                        " register another function under a different name"
                    )
                self.tasks[task.name] = task
            return task

        if len(functions) > 1:
            raise TypeError("@app.task takes one function")
        if functions:
            function = functions[0]
            if options or bind:
                raise TypeError("use @app.task or @app.task(**options), not both")
            return register(function)
        return register

    # -- eager mode --
    @property
    def is_eager(self) -> bool:
        """True when ``delay()`` runs tasks inline (``App(eager=True)`` or ``app.eager()``)."""
        return self._eager.get()

    @contextmanager
    def eager(self, enabled: bool = True) -> Iterator[None]:
        """Run tasks inline on ``delay()`` within this block (this thread / async context)."""
        token = self._eager.set(enabled)
        try:
            yield
        finally:
            self._eager.reset(token)

    def get_task(self, name: str) -> Task[Any, Any]:
        try:
            return self.tasks[name]
        except KeyError:
            known = ", ".join(sorted(self.tasks)) or "none"
            raise UnknownTaskError(
                f"no task named {name!r} is registered with this app (known: {known})"
            ) from None

    def send_task(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> JobHandle[Any]:
        """Enqueue a registered task by name (``apply_async`` options accepted)."""
        return self.get_task(name).apply_async(args, kwargs, **options)

    # -- periodic schedules --
    def periodic(self, **options: Unpack[PeriodicOptions]) -> Callable[[TaskT], TaskT]:
        """Run a task on a schedule: ``@app.periodic(cron="*/5 * * * *")`` above ``@app.task``.

        See :class:`pgtasks.PeriodicOptions`; ``pgtasks beat`` enqueues the jobs.
        """

        def register(task: TaskT) -> TaskT:
            self.add_periodic(task, **options)
            return task

        return register

    def add_periodic(
        self, task: Task[Any, Any] | str, **options: Unpack[PeriodicOptions]
    ) -> Schedule:
        """Declare a schedule for a registered task (or task name) at run time."""
        schedule = build_schedule(self, task, **options)
        with self._lock:
            if schedule.name in self.schedules:
                raise TaskRegistrationError(
                    f"a schedule named {schedule.name!r} already exists; pass name= to"
                    " declare another schedule of the same task and expression"
                )
            self.schedules[schedule.name] = schedule
        return schedule

    # -- pools --
    def _get_pool(self) -> ConnectionPool[Any]:
        with self._lock:
            pid = os.getpid()
            if self._pool is None or self._pool_pid != pid:
                # A pool inherited through fork() belongs to the parent: never reuse or close it.
                pool: ConnectionPool[Any] = ConnectionPool(
                    self.dsn,
                    min_size=self.pool_min_size,
                    max_size=self.pool_max_size,
                    kwargs=_db.pool_kwargs(),
                    timeout=self.connect_timeout,
                    name=f"pgtasks-{self.schema}",
                    open=False,
                )
                try:
                    # Wait for the first connection(s): a first request that had to wait
                    # would make the pool open one more connection at once, and a
                    # one-by-one producer would then alternate between two server
                    # processes for the pool's max_idle (about 20 µs more per enqueue).
                    pool.open(wait=True, timeout=self.connect_timeout)
                except PoolTimeout as error:  # the pool closed itself
                    timeout: PoolTimeout | None = error
                else:
                    timeout = None
                    self._pool, self._pool_pid = pool, pid
            else:
                return self._pool
        if timeout is not None:
            raise self._unavailable(timeout) from None
        return pool

    async def _get_apool(self) -> AsyncConnectionPool[Any]:
        loop = asyncio.get_running_loop()
        if self._apool is None or self._apool_loop is not loop:
            apool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                self.dsn,
                min_size=self.pool_min_size,
                max_size=self.pool_max_size,
                kwargs=_db.pool_kwargs(),
                timeout=self.connect_timeout,
                name=f"pgtasks-{self.schema}-async",
                open=False,
            )
            try:
                # Waiting for the first connection keeps no connection attempt running in
                # the background when a short-lived loop (asyncio.run) ends.
                await apool.open(wait=True, timeout=self.connect_timeout)
            except PoolTimeout as error:
                await apool.close()
                raise self._unavailable(error) from None
            self._apool, self._apool_loop = apool, loop
        return self._apool

    def _unavailable(self, cause: BaseException | None) -> Exception:
        if isinstance(cause, PoolTimeout) or cause is None:
            probed = _db.probe_connection_error(self.dsn, self.connect_timeout)
            if probed is None and isinstance(cause, PoolTimeout):
                # The server answers: the pool is exhausted, not the database down.
                return PoolExhaustedError(
                    f"no free connection in this process's pool within"
                    f" {self.connect_timeout:g} s: all {self.pool_max_size} (pool_max_size)"
                    " are in use. Is a task or caller holding connections (a leaked or"
                    f" long transaction)? The server at {self.describe_database()} is reachable."
                )
            cause = probed or cause
        return _db.unavailable_error(self.dsn, cause, self.connect_timeout)

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection (autocommit) with the schema checked, for your own queries."""
        pool = self._get_pool()
        try:
            connection_context = pool.connection(timeout=self.connect_timeout)
            conn = connection_context.__enter__()
        except PoolTimeout as error:
            raise self._unavailable(error) from None
        try:
            self._check_schema(conn)
            yield conn
        except BaseException as error:
            if not connection_context.__exit__(type(error), error, error.__traceback__):
                raise
        else:
            connection_context.__exit__(None, None, None)

    @asynccontextmanager
    async def aconnection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        pool = await self._get_apool()
        try:
            connection_context = pool.connection(timeout=self.connect_timeout)
            conn = await connection_context.__aenter__()
        except PoolTimeout as error:
            raise self._unavailable(error) from None
        try:
            await self._acheck_schema(conn)
            yield conn
        except BaseException as error:
            if not await connection_context.__aexit__(type(error), error, error.__traceback__):
                raise
        else:
            await connection_context.__aexit__(None, None, None)

    def _retrying(self) -> dict[str, Any]:
        return {
            "stop": tenacity.stop_after_attempt(self.connect_attempts),
            "wait": tenacity.wait_exponential(multiplier=0.1, max=2.0),
            "retry": tenacity.retry_if_exception(_is_connection_failure),
            "reraise": True,
        }

    def _run(self, operation: Callable[[psycopg.Connection[Any]], T], *, describe: str) -> T:
        """Run ``operation`` on a pooled connection, retrying broken connections."""

        def attempt() -> T:
            # What ``with self.connection()`` does, without its two generator context
            # managers: a one-job enqueue pays for every microsecond spent here.
            pool = self._pool
            if pool is None or self._pool_pid != os.getpid():
                pool = self._get_pool()
            try:
                conn = pool.getconn(timeout=self.connect_timeout)
            except PoolTimeout as error:
                raise self._unavailable(error) from None
            try:
                # Commits (or rolls back) what is left open, as pool.connection() does:
                # a pooled connection may have been taken out of autocommit by its user.
                with conn:
                    if not self._schema_checked:
                        self._check_schema(conn)
                    return operation(conn)
            finally:
                pool.putconn(conn)  # replaces a broken connection

        try:
            # The first try goes without tenacity: building its machinery costs more than
            # the round trip of a one-job enqueue. Broken connections retry through it.
            return attempt()
        except psycopg.OperationalError as error:
            if not _is_connection_failure(error) or self.connect_attempts < 2:
                if _is_connection_failure(error):
                    raise self._unavailable(error) from None
                raise
        retrying = self._retrying()
        retrying["stop"] = tenacity.stop_after_attempt(self.connect_attempts - 1)
        try:
            return tenacity.Retrying(**retrying)(attempt)
        except psycopg.OperationalError as error:
            if _is_connection_failure(error):
                raise self._unavailable(error) from None
            raise

    async def _arun(
        self,
        operation: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]],
        *,
        describe: str,
    ) -> T:
        async def attempt() -> T:
            async with self.aconnection() as conn:
                return await operation(conn)

        try:
            # As in _run: the first try goes without tenacity's machinery.
            return await attempt()
        except psycopg.OperationalError as error:
            if not _is_connection_failure(error) or self.connect_attempts < 2:
                if _is_connection_failure(error):
                    raise self._unavailable(error) from None
                raise
        retrying = self._retrying()
        retrying["stop"] = tenacity.stop_after_attempt(self.connect_attempts - 1)
        try:
            return await tenacity.AsyncRetrying(**retrying)(attempt)
        except psycopg.OperationalError as error:
            if _is_connection_failure(error):
                raise self._unavailable(error) from None
            raise

    # -- schema --
    def _check_schema(self, conn: psycopg.Connection[Any]) -> None:
        if not self._schema_checked:
            check_version(self.schema, self.store.get_schema_version(conn))
            self._schema_checked = True

    async def _acheck_schema(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if not self._schema_checked:
            check_version(self.schema, await self.store.aget_schema_version(conn))
            self._schema_checked = True

    def migrate(self) -> list[Migration]:
        """Create or upgrade the schema; safe to run concurrently and repeatedly."""
        pool = self._get_pool()
        try:
            with pool.connection(timeout=self.connect_timeout) as conn:
                applied = Migrator(self.store).migrate(conn)
                check_version(self.schema, self.store.get_schema_version(conn))
        except PoolTimeout as error:
            raise self._unavailable(error) from None
        self._schema_checked = True
        return applied

    def check_schema(self) -> None:
        """Raise SchemaNotMigratedError / SchemaTooNewError unless the schema is current."""
        self._schema_checked = False
        with self.connection():
            pass

    # -- enqueue --
    def _insert(self, conn: psycopg.Connection[Any], specs: Sequence[JobSpec]) -> list[InsertedJob]:
        if len(specs) <= BULK_CHUNK:
            return self.store.insert_jobs(conn, specs)
        inserted: list[InsertedJob] = []
        with conn.transaction():
            for start in range(0, len(specs), BULK_CHUNK):
                inserted += self.store.insert_jobs(conn, specs[start : start + BULK_CHUNK])
        return inserted

    async def _ainsert(
        self, conn: psycopg.AsyncConnection[Any], specs: Sequence[JobSpec]
    ) -> list[InsertedJob]:
        if len(specs) <= BULK_CHUNK:
            return await self.store.ainsert_jobs(conn, specs)
        inserted: list[InsertedJob] = []
        async with conn.transaction():
            for start in range(0, len(specs), BULK_CHUNK):
                inserted += await self.store.ainsert_jobs(conn, specs[start : start + BULK_CHUNK])
        return inserted

    def _handles(self, inserted: list[InsertedJob]) -> list[JobHandle[Any]]:
        return [JobHandle(self, job_id, existed=existed) for job_id, existed in inserted]

    def enqueue_many(
        self, specs: Sequence[JobSpec], *, connection: psycopg.Connection[Any] | None = None
    ) -> list[JobHandle[Any]]:
        """Insert built JobSpecs (see Task.build_spec); all or none are written."""
        if not specs:
            return []
        if self.is_eager:
            return run_eagerly(self, specs)
        if connection is not None:
            self._check_schema(connection)
            return self._handles(self._insert(connection, specs))
        return self._handles(self._run(lambda conn: self._insert(conn, specs), describe="enqueue"))

    def enqueue(
        self, spec: JobSpec, *, connection: psycopg.Connection[Any] | None = None
    ) -> JobHandle[Any]:
        """Insert one built JobSpec (the path of ``delay`` and ``apply_async``)."""
        if self.is_eager:
            return run_eagerly(self, [spec])[0]
        if connection is not None:
            self._check_schema(connection)
            job = self.store.insert_job(connection, spec)
        else:
            job = self._run(lambda conn: self.store.insert_job(conn, spec), describe="enqueue")
        return JobHandle(self, job.id, existed=job.existed)

    async def aenqueue_many(
        self, specs: Sequence[JobSpec], *, connection: psycopg.AsyncConnection[Any] | None = None
    ) -> list[JobHandle[Any]]:
        if not specs:
            return []
        if self.is_eager:
            return await arun_eagerly(self, specs)
        if connection is not None:
            await self._acheck_schema(connection)
            return self._handles(await self._ainsert(connection, specs))
        return self._handles(
            await self._arun(lambda conn: self._ainsert(conn, specs), describe="enqueue")
        )

    async def aenqueue(
        self, spec: JobSpec, *, connection: psycopg.AsyncConnection[Any] | None = None
    ) -> JobHandle[Any]:
        if self.is_eager:
            return (await arun_eagerly(self, [spec]))[0]
        if connection is not None:
            await self._acheck_schema(connection)
            job = await self.store.ainsert_job(connection, spec)
        else:
            job = await self._arun(
                lambda conn: self.store.ainsert_job(conn, spec), describe="enqueue"
            )
        return JobHandle(self, job.id, existed=job.existed)

    # -- jobs --
    def get_job(self, job_id: int) -> JobHandle[Any]:
        """A handle for an existing job; JobNotFoundError when there is none."""
        if (
            self._run(lambda conn: self.store.get_job_status(conn, job_id), describe="get_job")
            is None
        ):
            raise JobNotFoundError(f"job {job_id} does not exist (it may have been pruned)")
        return JobHandle(self, job_id)

    async def aget_job(self, job_id: int) -> JobHandle[Any]:
        status = await self._arun(
            lambda conn: self.store.aget_job_status(conn, job_id), describe="get_job"
        )
        if status is None:
            raise JobNotFoundError(f"job {job_id} does not exist (it may have been pruned)")
        return JobHandle(self, job_id)

    def cancel(self, job_id: int) -> CancelResult:
        """Cancel a job: pending → cancelled (never runs); running → flagged, its worker is
        told, and it ends cancelled (async tasks get CancelledError, bound sync tasks see
        ``ctx.cancelled()``); finished → nothing changes (``outcome == "already_finished"``).
        """
        row = self._run(lambda conn: self.store.cancel_job(conn, job_id), describe="cancel")
        if row is None:
            raise JobNotFoundError(f"job {job_id} does not exist (it may have been pruned)")
        return CancelResult.from_row(job_id, row)

    async def acancel(self, job_id: int) -> CancelResult:
        row = await self._arun(lambda conn: self.store.acancel_job(conn, job_id), describe="cancel")
        if row is None:
            raise JobNotFoundError(f"job {job_id} does not exist (it may have been pruned)")
        return CancelResult.from_row(job_id, row)

    def result_listener(self) -> ResultListener:
        """This process's listener for finished jobs (started by the first ``get()``)."""
        with self._lock:
            if self._results is None or self._results_pid != os.getpid():
                self._results, self._results_pid = ResultListener(self), os.getpid()
            return self._results

    def get_jobs(self, job_ids: Sequence[int]) -> list[JobRow]:
        """Snapshots of the jobs with these ids, in id order (missing ids are skipped)."""
        ids = list(job_ids)
        return self._run(lambda conn: self.store.get_jobs(conn, ids), describe="get_jobs")

    async def aget_jobs(self, job_ids: Sequence[int]) -> list[JobRow]:
        ids = list(job_ids)
        return await self._arun(lambda conn: self.store.aget_jobs(conn, ids), describe="get_jobs")

    # -- lifetime --
    def close(self) -> None:
        """Close this process's connection pools (the async one only from its own loop)."""
        results, self._results = self._results, None
        if results is not None and self._results_pid == os.getpid():
            results.close()
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

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
