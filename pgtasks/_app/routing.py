"""Which store serves what: the App of one of its stores (``app.for_store(name)``), the
store of an enqueue (its queue's route) and of a job (its id), and the App methods that
take an id.

``app.for_store(name)`` is the App seen from one store: the same tasks, schedules and
options, whose ``database`` is that store's. Everything written for one database (a
Worker, Beat, the admin operations, a JobHandle) works on it unchanged; an App of one
store is its own and only one, so none of this costs it anything.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from .._errors import CrossStoreError, JobNotFoundError
from .._jobs import CancelResult, JobRow, JobSpec
from .._payload import encode_meta
from .._store.database import Database
from .handle import JobHandle

if TYPE_CHECKING:
    from .app import App
    from .limits import QueueLimits
    from .tasks import Task


def for_store(app: App, name: str) -> App:
    """The App of store ``name`` (made once per store, shared)."""
    if app.store_name == name and (app.store_router.single or app is not app.root):
        return app  # (an App of several stores has an App of its default store too)
    root = app.root
    view = root.views.get(name)
    if view is None:
        root.store_router.layout.check_store(name)
        with root._lock:
            view = root.views.get(name)
            if view is None:
                view = _view(root, name)
                root.views[name] = view
    view.instrumentation = root.instrumentation
    return view


def _view(root: App, name: str) -> App:
    view = copy.copy(root)
    database = root.store_router.databases[name]
    view.database = database
    view.settings = dataclasses.replace(root.settings, database=database.settings, store=name)
    view.store_name = name
    view._lock = threading.Lock()
    view._results, view._results_pid = None, 0
    return view


def for_specs(
    app: App, specs: Sequence[JobSpec], connection: psycopg.Connection[Any] | None = None
) -> App:
    """The App of the store these jobs go to (their queues' one store): CrossStoreError
    when they span stores, or a limited task goes to another store than its queue's."""
    name = store_of_specs(app, specs)
    if connection is not None:
        app.store_router.check_connection(connection, name, specs[0].queue)
    return for_store(app, name)


async def afor_specs(
    app: App, specs: Sequence[JobSpec], connection: psycopg.AsyncConnection[Any] | None
) -> App:
    name = store_of_specs(app, specs)
    if connection is not None:
        await app.store_router.acheck_connection(connection, name, specs[0].queue)
    return for_store(app, name)


def store_of_specs(app: App, specs: Sequence[JobSpec]) -> str:
    stores = app.store_router
    if len(specs) == 1:  # delay(): one route to read
        spec = specs[0]
        name = stores.store_of_queue(spec.queue)
        _check_limited(app, spec, name)
        return name
    names = {spec.queue: stores.store_of_queue(spec.queue) for spec in specs}
    if len(set(names.values())) > 1:
        routes = ", ".join(f"{queue} → {name}" for queue, name in sorted(names.items()))
        raise CrossStoreError(
            f"these jobs go to several stores ({routes}): one enqueue writes to one store"
            " (all or none); enqueue each store's jobs on their own"
        )
    name = next(iter(names.values()))
    for spec in specs:
        _check_limited(app, spec, name)
    return name


def _check_limited(app: App, spec: JobSpec, name: str) -> None:
    """A job of a task with limits goes to its task's queue's store (CrossStoreError)."""
    task = app.tasks.get(spec.task_name)
    if task is not None and task.limits is not None:
        home = app.store_router.store_of_queue(task.queue)
        if home != name:
            raise CrossStoreError(
                f"task {task.name!r} has limits, held in store {home!r} (its queue"
                f" {task.queue!r}); queue {spec.queue!r} routes to store {name!r}: a"
                " limit counts one store's jobs, so a limited task's jobs stay in its"
                " queue's store"
            )


def for_queue(app: App, queue: str) -> App:
    """The App of the store ``queue`` routes to (the App of one store: itself)."""
    if app.store_router.single or app.settings.store is not None:
        return app
    return for_store(app, app.store_of_queue(queue))


def held(app: App) -> tuple[list[Task[..., Any]], list[QueueLimits]]:
    """The tasks and queue limits of ``app`` whose limits its store holds: a limit lives
    in the store of its queue (a task's: the task's queue), where its jobs are counted;
    every one for an App of one store or of several (the root)."""
    # Each task once (a renamed task is registered under its aliases too).
    tasks = [task for name, task in app.tasks.items() if name == task.name]
    queues = list(app.queue_limits.values())
    if app.store_router.single or app.settings.store is None:
        return tasks, queues
    here = app.store_name
    return (
        [task for task in tasks if app.store_of_queue(task.queue) == here],
        [limits for limits in queues if app.store_of_queue(limits.queue) == here],
    )


def serving(app: App) -> list[App]:
    """The Apps of the stores ``app`` serves: every store for an App of several, else
    its one."""
    if app.store_router.single or app.settings.store is not None:
        return [app]
    return [for_store(app, name) for name in app.store_router.names]


def paused_queues(app: App) -> list[str]:
    names: list[str] = []
    for owner in serving(app):
        names.extend(row["queue"] for row in owner.database.run(owner.queries.get_paused_queues))
    return sorted(names)


def for_id(app: App, object_id: int) -> App:
    """The App of the store that issued this job or workflow id."""
    if app.store_router.single:
        return app
    return for_store(app, app.store_router.name_for_id(object_id))


def _missing(job_id: int) -> JobNotFoundError:
    return JobNotFoundError(f"job {job_id} does not exist (it may have been pruned)")


def get_job(app: App, job_id: int) -> JobHandle[Any]:
    owner = for_id(app, job_id)
    if owner.database.run(lambda conn: owner.queries.get_job_status(conn, job_id)) is None:
        raise _missing(job_id)
    return JobHandle(owner, job_id)


async def aget_job(app: App, job_id: int) -> JobHandle[Any]:
    owner = for_id(app, job_id)
    status = await owner.database.arun(lambda conn: owner.queries.aget_job_status(conn, job_id))
    if status is None:
        raise _missing(job_id)
    return JobHandle(owner, job_id)


def cancel(app: App, job_id: int, *, terminate: bool = False) -> CancelResult:
    owner = for_id(app, job_id)
    row = owner.database.run(
        lambda conn: owner.queries.cancel_job(conn, job_id, terminate=terminate)
    )
    if row is None:
        raise _missing(job_id)
    return CancelResult.from_row(job_id, row, terminate=terminate)


async def acancel(app: App, job_id: int, *, terminate: bool = False) -> CancelResult:
    owner = for_id(app, job_id)
    row = await owner.database.arun(
        lambda conn: owner.queries.acancel_job(conn, job_id, terminate=terminate)
    )
    if row is None:
        raise _missing(job_id)
    return CancelResult.from_row(job_id, row, terminate=terminate)


def update_job_meta(
    app: App, job_id: int, *, worker_id: int, attempt: int, patch: Mapping[str, Any]
) -> bool:
    patch_json = encode_meta("meta update", patch, max_bytes=app.max_payload_bytes, internal=True)
    if patch_json is None:
        return True
    owner = for_id(app, job_id)
    return owner.database.run(
        lambda conn: owner.queries.update_job_meta(
            conn, job_id=job_id, worker_id=worker_id, attempt=attempt, patch_json=patch_json
        )
    )


def get_jobs(app: App, job_ids: Sequence[int]) -> list[JobRow]:
    rows: list[JobRow] = []
    for name, ids in app.store_router.group_ids(list(job_ids)).items():
        owner = for_store(app, name)

        def read(conn: psycopg.Connection[Any], owner: App = owner, ids: list[int] = ids) -> Any:
            return owner.queries.get_jobs(conn, ids)

        rows.extend(owner.database.run(read))
    return sorted(rows, key=lambda row: row.id) if len(rows) > 1 else rows


async def aget_jobs(app: App, job_ids: Sequence[int]) -> list[JobRow]:
    rows: list[JobRow] = []
    for name, ids in app.store_router.group_ids(list(job_ids)).items():
        owner = for_store(app, name)
        rows.extend(await owner.database.arun(_reader(owner, ids)))
    return sorted(rows, key=lambda row: row.id) if len(rows) > 1 else rows


def restore_database(app: App, database: Database) -> None:
    """Make ``database`` the App's (for an App of several stores: its store's)."""
    app.close()
    app.database = database
    app.store_router.databases[app.store_name] = database
    layout = app.store_router.layout
    stores = dict(layout.stores)
    stores[app.store_name] = database.settings
    app.store_router.layout = dataclasses.replace(layout, stores=stores)
    app.settings = dataclasses.replace(
        app.settings, database=database.settings, layout=app.store_router.layout
    )


def _reader(
    owner: App, ids: list[int]
) -> Callable[[psycopg.AsyncConnection[Any]], Awaitable[list[JobRow]]]:
    def read(conn: psycopg.AsyncConnection[Any]) -> Awaitable[list[JobRow]]:
        return owner.queries.aget_jobs(conn, ids)

    return read
