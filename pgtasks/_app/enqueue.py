"""The enqueue paths of an App (``App.enqueue``, ``enqueue_many`` and their async twins):
eager mode, the schema check of a caller's connection, the insert (traced when the App
is instrumented) and the handles, with the deduplicated enqueues counted."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from .._counters import ENQUEUES_DEDUPLICATED
from .._jobs import DebouncedJobSpec, InsertedJob, JobSpec
from .eager import arun_eagerly, run_eagerly
from .handle import JobHandle

if TYPE_CHECKING:
    from .._store.ports import EnqueuePort
    from .app import App


def enqueuer(app: App) -> EnqueuePort:
    """The statements of the enqueue path: ``app``'s catalog seen through its port."""
    return app.queries


def handles(
    app: App, inserted: list[InsertedJob], specs: Sequence[JobSpec] = ()
) -> list[JobHandle[Any]]:
    """A handle per inserted job; those an existing idempotency key answered are counted
    (a debounced enqueue that replaced its key's job is counted by its statement, as
    enqueues_debounced)."""
    if specs and any(isinstance(spec, DebouncedJobSpec) for spec in specs):
        debounced = {i for i, spec in enumerate(specs) if isinstance(spec, DebouncedJobSpec)}
        inserted_counted = [job for i, job in enumerate(inserted) if i not in debounced]
    else:
        inserted_counted = inserted
    deduplicated = sum(1 for _, existed in inserted_counted if existed)
    if deduplicated:
        app.counters.add(ENQUEUES_DEDUPLICATED, deduplicated, store=False)
    return [JobHandle(app, job_id, existed=existed) for job_id, existed in inserted]


def enqueue_many(
    app: App, specs: Sequence[JobSpec], connection: psycopg.Connection[Any] | None
) -> list[JobHandle[Any]]:
    if not specs:
        return []
    if app.is_eager:
        return run_eagerly(app, specs)
    if not app.store_router.single:  # the store of the jobs' queues (one, or an error)
        app = app.routing.for_specs(specs, connection)
    if connection is not None:
        app.database.check_schema(connection)
        return handles(app, app.insert_specs(connection, specs), specs)
    return handles(app, app.database.run(lambda conn: app.insert_specs(conn, specs)), specs)


def enqueue(app: App, spec: JobSpec, connection: psycopg.Connection[Any] | None) -> JobHandle[Any]:
    if app.is_eager:
        return run_eagerly(app, [spec])[0]
    if app.instrumentation is not None:
        return enqueue_many(app, [spec], connection)[0]
    if not app.store_router.single:
        app = app.routing.for_specs([spec], connection)
    if connection is not None:
        app.database.check_schema(connection)
        job = enqueuer(app).insert_job(connection, spec)
    else:
        job = app.database.run(lambda conn: enqueuer(app).insert_job(conn, spec))
    return handles(app, [job], [spec])[0]


async def aenqueue_many(
    app: App, specs: Sequence[JobSpec], connection: psycopg.AsyncConnection[Any] | None
) -> list[JobHandle[Any]]:
    if not specs:
        return []
    if app.is_eager:
        return await arun_eagerly(app, specs)
    if not app.store_router.single:
        app = await app.routing.afor_specs(specs, connection)
    if connection is not None:
        await app.database.acheck_schema(connection)
        return handles(app, await app.ainsert_specs(connection, specs), specs)
    return handles(app, await app.database.arun(lambda conn: app.ainsert_specs(conn, specs)), specs)


async def aenqueue(
    app: App, spec: JobSpec, connection: psycopg.AsyncConnection[Any] | None
) -> JobHandle[Any]:
    if app.is_eager:
        return (await arun_eagerly(app, [spec]))[0]
    if app.instrumentation is not None:
        return (await aenqueue_many(app, [spec], connection))[0]
    if not app.store_router.single:
        app = await app.routing.afor_specs([spec], connection)
    if connection is not None:
        await app.database.acheck_schema(connection)
        job = await enqueuer(app).ainsert_job(connection, spec)
    else:
        job = await app.database.arun(lambda conn: enqueuer(app).ainsert_job(conn, spec))
    return handles(app, [job], [spec])[0]
