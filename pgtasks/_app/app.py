"""App: configuration, the task registry, connection pools and the enqueue paths."""

from __future__ import annotations

import contextvars
import dataclasses
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar, overload

import psycopg
from typing_extensions import Concatenate, ParamSpec, Self, Unpack  # noqa: UP035

from .._counters import Tally
from .._cron import PeriodicOptions, Schedule
from .._errors import TaskRegistrationError, UnknownTaskError
from .._instrumentation import Instrumentation
from .._jobs import InsertedJob, JobContext, JobSpec
from .._limits import LimitDefinition
from .._payload import check_name
from .._store.database import Database
from .admin import Admin
from .app_database import DatabaseApp
from .durable import DurableApp
from .eager import arun_eagerly, run_eagerly
from .enqueue import Enqueuer
from .handle import JobHandle
from .job_actions import JobActions
from .layout import DEFAULT_STORE
from .limits import QueueLimits, app_definitions
from .results import ResultListener
from .routing import Routing
from .schedules import build_schedule, check_periodic_options
from .settings import (
    AppOptions,
    AppSettings,
    Setting,
    app_signature,
    check_keywords,
)
from .store_router import StoreRouter
from .task_registry import Registry
from .tasks import Task, TaskSettings
from .workflow_admin import describe_workflow
from .workflows import Signature

P = ParamSpec("P")
R = TypeVar("R")
TaskT = TypeVar("TaskT", bound="Task[Any, Any]")

_apps: weakref.WeakSet[App] = weakref.WeakSet()  # every App: a forked child lets go of them
#: In a forked child: the parent's result listeners, kept (never used or closed).
_inherited: list[object] = []


def _forget_inherited_listeners() -> None:
    """``os.fork()`` hook (child side): the parent's result listener is not the child's
    (the pools are let go of by the Database's own hook)."""
    for app in [each for root in list(_apps) for each in (root, *root.views.values())]:
        if app._results is not None:
            _inherited.append(app._results)
        app._lock = threading.Lock()  # another thread may have held it during the fork
        app.routing.after_fork()
        app.registry.after_fork()
        app._results, app._results_pid = None, 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited_listeners)


class App(DatabaseApp, DurableApp, JobActions):
    """A pgtasks application: tasks, configuration and the database connection.

    ``dsn`` resolution: ``App(dsn=...)`` > ``PGTASKS_DSN`` > ``DATABASE_URL`` > the
    embedded PostgreSQL in ``./.pgtasks`` (development only; needs ``pgtasks[embedded]``).
    ``schema``: ``App(schema=...)`` > ``PGTASKS_SCHEMA`` > ``"pgtasks"``.
    Pools are created on first use and closed by :meth:`close` or ``with app:``.

    Behind a transaction-mode pooler (PgBouncer ``pool_mode = transaction``): ``dsn`` is
    the pooler and ``session_dsn`` (or ``PGTASKS_SESSION_DSN``) the server itself, for
    LISTEN, the beat and pruner locks and migrations; ``pooled=True`` without a
    ``session_dsn`` makes pgtasks poll instead. ``prepared_statements``: whether
    connections to a pooled ``dsn`` may prepare statements (off by default: PgBouncer
    before 1.21 cannot hold them). ``replica_dsn`` (or ``PGTASKS_REPLICA_DSN``): a
    streaming replica for the dashboard, ``pgtasks stats``, ``pgtasks jobs list`` and
    metrics; never for reads of the app's own writes. See docs/howto/deployment.md.

    Several databases: ``stores={"default": dsn, "bulk": Store(dsn2)}`` and
    ``routes={"emails": "bulk"}`` (unrouted queues go to "default"; or PGTASKS_STORES
    and PGTASKS_ROUTES); see docs/howto/scaling.md.
    """

    default_queue: Setting[str] = Setting()
    default_max_attempts: Setting[int] = Setting()
    max_payload_bytes: Setting[int] = Setting()
    max_result_bytes: Setting[int] = Setting()
    max_error_bytes: Setting[int] = Setting()
    lease_timeout: Setting[float] = Setting()
    heartbeat_interval: Setting[float] = Setting()
    rescue_interval: Setting[float] = Setting()
    poll_interval: Setting[float] = Setting()
    prune_done_after: Setting[float | None] = Setting()
    prune_failed_after: Setting[float | None] = Setting()
    prune_interval: Setting[float] = Setting()
    heal_interval: Setting[float] = Setting()
    pool_min_size: Setting[int] = Setting(path="pools.min_size")
    pool_max_size: Setting[int] = Setting(path="pools.max_size")
    connect_timeout: Setting[float] = Setting(path="pools.connect_timeout")
    connect_attempts: Setting[int] = Setting(path="pools.connect_attempts")
    #: Where the embedded server keeps its data (when no DSN is configured).
    embedded_dir: Setting[Path] = Setting(path="database.embedded_dir")

    def __init__(self, dsn: str | None = None, **options: Unpack[AppOptions]) -> None:
        check_keywords(options)
        #: The App's configuration, validated once (``dsn`` and every keyword of AppOptions).
        self.settings = AppSettings.resolve(dsn, **options)
        #: Its tasks (``tasks``, by each of their names) and schedules (``schedules``).
        self.registry: Registry[Task[Any, Any]] = Registry()
        #: Queues declared with limits (``app.queue()``), by name.
        self.queue_limits: dict[str, QueueLimits] = {}
        self._instrumentation: Instrumentation | None = None
        database = Database(self.settings.database, self.settings.pools)
        #: Its stores (one Database each, this one's "default") and the routes of queues.
        self.store_router = StoreRouter(self.settings.store_layout, self.settings.pools, database)
        self._eager: contextvars.ContextVar[bool] = contextvars.ContextVar(
            f"pgtasks_eager_{id(self)}", default=self.settings.eager
        )
        #: This process's counts of pgtasks._counters' names (database: ``pgtasks stats``).
        self.counters = Tally()
        self._serve(self, self.settings, database)
        _apps.add(self)

    def _serve(self, root: App, settings: AppSettings, database: Database) -> None:
        """Serve ``database`` with ``settings``; an App of one store of several shares its
        ``root``'s tasks, queues, schedules, stores, counters and eager mode."""
        self.settings = settings
        #: Connections: DSN, pools, schema check, retries; its queries: every statement.
        self.database = database
        #: The store this App serves (an App of one store of several: app.for_store()).
        self.store_name = settings.store or DEFAULT_STORE
        self.root = root
        self.registry, self.queue_limits = root.registry, root.queue_limits
        self.tasks, self.schedules = self.registry.tasks, self.registry.schedules
        self.store_router, self.counters, self._eager = (
            root.store_router,
            root.counters,
            root._eager,
        )
        self._lock = threading.Lock()
        self._results: ResultListener | None = None
        self._results_pid = 0
        #: Which store serves what (the App of a store, of a queue, of an id).
        self.routing: Routing[App] = Routing(
            self.store_router,
            self,
            store=settings.store,
            tasks=self.tasks,
            make_view=root._of_store,
            root=None if root is self else root.routing,
        )
        #: The App of each store (``for_store``) of an App of several (shared with them).
        self.views = self.routing.views
        #: The insert path (the store of the jobs, the schema check, the traced insert).
        self.enqueuer: Enqueuer[App] = Enqueuer(self.routing, self.counters, self._hooks)
        #: The operators' reads and writes (stats, workers, queues, limits, retries...).
        self.admin = Admin(self.routing)

    def _of_store(self, name: str) -> App:
        """A new App of store ``name`` of this (root) App: its settings with that store's
        database, serving that store's Database."""
        database = self.store_router.databases[name]
        view = type(self).__new__(type(self))
        view._serve(
            self,
            dataclasses.replace(self.settings, database=database.settings, store=name),
            database,
        )
        return view

    @property
    def instrumentation(self) -> Instrumentation | None:
        """Tracing hooks (pgtasks.contrib.otel.instrument); None: nothing is traced. The
        Apps of the stores of an App share its root's."""
        return self.root._instrumentation

    @instrumentation.setter
    def instrumentation(self, value: Instrumentation | None) -> None:
        self.root._instrumentation = value

    def _hooks(self) -> Instrumentation | None:
        return self.root._instrumentation

    def __repr__(self) -> str:
        where = "" if self.store_router.single else f" store={self.store_name}"
        return f"<App schema={self.schema}{where} tasks={len(self.tasks)}>"

    def for_store(self, name: str) -> App:
        """This App as seen from store ``name``: the same tasks and options, its database
        that store's (what a Worker, Beat and the operations of one store are given)."""
        return self.routing.for_store(name)

    def store_of_queue(self, queue: str) -> str:
        """The name of the store ``queue`` routes to."""
        return self.store_router.store_of_queue(queue)

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
            return register_task(self, function, bind=bind, options=options)

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
        check_periodic_options(options)
        if isinstance(task, str):
            task = self.get_task(task)
        if not isinstance(task, Task):
            raise TaskRegistrationError(
                f"periodic schedules run tasks, got {task!r}: stack @app.periodic(...) above"
                " @app.task, or pass a task to app.add_periodic()"
            )
        if task.app is not self or self.tasks.get(task.name) is not task:
            raise TaskRegistrationError(f"task {task.name!r} is not registered with this app")
        return self.registry.add_schedule(build_schedule(task, **options))

    # -- enqueue --
    def insert_specs(
        self, conn: psycopg.Connection[Any], specs: Sequence[JobSpec]
    ) -> list[InsertedJob]:
        """Insert specs on ``conn``: the one insert path every enqueue and beat share (the
        instrumentation, when set, wraps it)."""
        return self.enqueuer.insert_specs(conn, specs)

    async def ainsert_specs(
        self, conn: psycopg.AsyncConnection[Any], specs: Sequence[JobSpec]
    ) -> list[InsertedJob]:
        return await self.enqueuer.ainsert_specs(conn, specs)

    def enqueue_many(
        self, specs: Sequence[JobSpec], *, connection: psycopg.Connection[Any] | None = None
    ) -> list[JobHandle[Any]]:
        """Insert built JobSpecs (see Task.build_spec); all or none are written."""
        if not specs or self.is_eager:
            return run_eagerly(self, specs)
        owner, inserted = self.enqueuer.enqueue_many(specs, connection)
        return [JobHandle(owner, job_id, existed=existed) for job_id, existed in inserted]

    def enqueue(
        self, spec: JobSpec, *, connection: psycopg.Connection[Any] | None = None
    ) -> JobHandle[Any]:
        """Insert one built JobSpec (the path of ``delay`` and ``apply_async``)."""
        if self.is_eager:
            return run_eagerly(self, [spec])[0]
        owner, (job_id, existed) = self.enqueuer.enqueue(spec, connection)
        return JobHandle(owner, job_id, existed=existed)

    async def aenqueue_many(
        self, specs: Sequence[JobSpec], *, connection: psycopg.AsyncConnection[Any] | None = None
    ) -> list[JobHandle[Any]]:
        if not specs or self.is_eager:
            return await arun_eagerly(self, specs)
        owner, inserted = await self.enqueuer.aenqueue_many(specs, connection)
        return [JobHandle(owner, job_id, existed=existed) for job_id, existed in inserted]

    async def aenqueue(
        self, spec: JobSpec, *, connection: psycopg.AsyncConnection[Any] | None = None
    ) -> JobHandle[Any]:
        if self.is_eager:
            return (await arun_eagerly(self, [spec]))[0]
        owner, (job_id, existed) = await self.enqueuer.aenqueue(spec, connection)
        return JobHandle(owner, job_id, existed=existed)

    # -- workflows --
    def get_workflow(self, workflow_id: int) -> dict[str, Any]:
        """A workflow's id, kind, status, created_at, finished_at and ``jobs`` (rows with
        their step, status and links); WorkflowNotFoundError when there is none."""
        return describe_workflow(self, workflow_id)

    def cancel_workflow(self, workflow_id: int) -> int:
        """Cancel what has not run of a workflow (running jobs are asked to stop); the
        number of jobs cancelled or asked to stop."""
        self.get_workflow(workflow_id)  # WorkflowNotFoundError
        owner = self.routing.for_id(workflow_id)
        rows = owner.database.run(lambda conn: owner.queries.cancel_workflow(conn, workflow_id))
        return len(rows)

    def signature(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        immutable: bool = False,
    ) -> Signature:
        """A signature of the task registered as ``name`` (UnknownTaskError otherwise)."""
        return Signature(self.get_task(name), args, kwargs, immutable=immutable)

    def result_listener(self) -> ResultListener:
        """This process's listener for finished jobs (started by the first ``get()``)."""
        with self._lock:
            if self._results is None or self._results_pid != os.getpid():
                self._results, self._results_pid = ResultListener(self), os.getpid()
            return self._results

    # -- queues --
    def queue(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        rate_limit: str | None = None,
        priority_aging: float | None = None,
    ) -> str:
        """Declare a queue's settings for its workers: at most ``concurrency`` jobs running,
        at most ``rate_limit`` ("100/m", "5/s") started per period (jobs enqueued from then
        on), a priority rising one level per ``priority_aging`` s waited (None: the App's)."""
        declared = QueueLimits.declare(name, concurrency, rate_limit, priority_aging)
        self.queue_limits[declared.queue] = declared
        return declared.queue

    def limit_definitions(self) -> list[LimitDefinition]:
        """Every concurrency and rate limit this app declares (tasks and queues); the App
        of one store of several (a worker's): those that store holds (routing.held)."""
        tasks, queues = self.routing.held(self.queue_limits)
        return app_definitions((task.limits for task in tasks), queues)

    def pause_queue(self, queue: str) -> bool:
        """Pause ``queue`` for every worker: none claims its jobs from at most one poll
        interval on. Jobs already running finish; enqueuing goes on. Persistent until
        :meth:`resume_queue`. Returns False when the queue was paused already.
        """
        name, owner = check_name("queue", queue), self.routing.for_queue(queue)
        return owner.database.run(lambda conn: owner.queries.pause_queue(conn, name))

    def resume_queue(self, queue: str) -> bool:
        """Resume a paused queue (its workers are woken and claim at once). Returns False
        when the queue was not paused."""
        name, owner = check_name("queue", queue), self.routing.for_queue(queue)
        return owner.database.run(lambda conn: owner.queries.resume_queue(conn, name))

    def paused_queues(self) -> list[str]:
        """The paused queues, by name."""
        return self.routing.paused_queues()

    # -- lifetime --
    def close(self) -> None:
        """Close this process's connection pools (the async one only from outside its loop)
        and result listener."""
        results, self._results = self._results, None
        if results is not None and self._results_pid == os.getpid():
            results.close()
        if self is not self.root:
            self.database.close()
            return
        for view in list(self.views.values()):
            view.close()
        self.store_router.close()

    async def aclose(self) -> None:
        await (self.store_router.aclose() if self is self.root else self.database.aclose())
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


# The keywords as inspect (and help()) show them, each with its type and default.
App.__init__.__dict__["__signature__"] = app_signature()


def register_task(
    app: App, function: Callable[..., Any], *, bind: bool, options: dict[str, Any]
) -> Task[Any, Any]:
    """Make ``function`` a task of ``app`` (``@app.task``), under its name and its former
    names (aliases); a second task of one name is a TaskRegistrationError."""
    if isinstance(function, Task):
        raise TaskRegistrationError(f"{function!r} is already a task")
    return app.registry.add_task(Task(app, function, bind=bind, **options))
