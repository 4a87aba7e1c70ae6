"""Procrastinate 3.10.0 beside pgtasks: same shapes as the pgtasks runner's functions.

Configuration, from Procrastinate's docs:
- ``App(connector=PsycopgConnector(...))``, the default connector (howto/basics/connector);
- one worker process, ``run_worker(concurrency=N)`` with an ``async def`` task: async
  sub-workers are how one process runs jobs in parallel (howto/concurrency: "Execute
  multiple jobs at the same time");
- a pool of concurrency + 1 connections (discussions, "Mind the size of your PostgreSQL
  pool": with short jobs "your pool will need to contain as many connections as your
  concurrency (plus one)"), opened at its full size before the run;
- ``listen_notify=True`` (the default) so an idle worker wakes on NOTIFY, not on its
  5 s poll; ``delete_jobs`` left at its default (``never``), the docs' default.
Enqueue: ``defer_async`` per job, ``batch_defer_async`` for batches of 1000
(howto/basics/batch_defer).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import psycopg

from benchmarks.peers._common import (
    Drain,
    Recorder,
    drain_result,
    latency_result,
    reset_database,
    wait_for_keys,
    wait_until_idle,
    worker_process,
)

DATABASE = "bench_procrastinate"
TASK = "noop"
WORKER = "benchmarks.peers.procrastinate_worker"
BATCH = 1000

T = TypeVar("T")


def make_app(dsn: str, *, recorder: Recorder | None = None, pool_size: int = 0) -> Any:
    """The benchmark App: one no-op task that logs its executions to ``recorder``."""
    from procrastinate import App, JobContext, PsycopgConnector

    pool: dict[str, Any] = {"min_size": pool_size, "max_size": pool_size} if pool_size else {}
    app = App(connector=PsycopgConnector(conninfo=dsn, **pool))

    @app.task(name=TASK, pass_context=True)
    async def noop(context: JobContext) -> None:
        started = time.time()
        if recorder is not None:
            assert context.job.id is not None
            recorder.record(str(context.job.id), started, time.time())

    return app


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def install(dsn: str) -> str:
    """A fresh ``bench_procrastinate_<db>`` database with Procrastinate's schema; return its DSN."""
    target = reset_database(dsn, DATABASE)

    async def go() -> None:
        async with make_app(target).open_async() as app:
            await app.schema_manager.apply_schema_async()

    run(go())
    return target


async def enqueue_batches(app: Any, count: int) -> list[str]:
    task = app.tasks[TASK]
    keys: list[str] = []
    for start in range(0, count, BATCH):
        ids = await task.batch_defer_async(*[{}] * min(BATCH, count - start))
        keys.extend(str(job_id) for job_id in ids)
    return keys


# -- enqueue -------------------------------------------------------------------------------------
def enqueue_one_by_one(dsn: str, count: int) -> float:
    target = install(dsn)

    async def go() -> float:
        async with make_app(target).open_async() as app:
            task = app.tasks[TASK]
            started = time.perf_counter()
            for _ in range(count):
                await task.defer_async()
            return count / (time.perf_counter() - started)

    return run(go())


def enqueue_bulk(dsn: str, count: int) -> float:
    target = install(dsn)
    batches = max(1, count // BATCH)

    async def go() -> float:
        async with make_app(target).open_async() as app:
            started = time.perf_counter()
            await enqueue_batches(app, batches * BATCH)
            return batches * BATCH / (time.perf_counter() - started)

    return run(go())


# -- processing ----------------------------------------------------------------------------------
def worker_note(concurrency: int) -> str:
    return f"run_worker(concurrency={concurrency}), pool {concurrency + 1}, listen_notify"


def processing(dsn: str, jobs: int, concurrency: int) -> Drain:
    target = install(dsn)

    async def fill() -> list[str]:
        async with make_app(target).open_async() as app:
            return await enqueue_batches(app, jobs)

    keys = set(run(fill()))
    with (
        psycopg.connect(target, autocommit=True) as conn,
        worker_process(WORKER, target, "--concurrency", str(concurrency)) as process,
    ):
        wait_for_keys(conn, keys, process)
    return drain_result(target, keys)


# -- latency -------------------------------------------------------------------------------------
def idle_latency(dsn: str, count: int, gap: float) -> tuple[float, float, float]:
    target = install(dsn)

    async def go(conn: psycopg.Connection[Any], process: Any) -> dict[str, float]:
        async with make_app(target).open_async() as app:
            task = app.tasks[TASK]
            warm_up = str(await task.defer_async())
            await asyncio.to_thread(wait_until_idle, conn, warm_up, process)
            enqueued: dict[str, float] = {}
            for _ in range(count):
                at = time.time()
                enqueued[str(await task.defer_async())] = at
                await asyncio.sleep(gap)
            await asyncio.to_thread(wait_for_keys, conn, set(enqueued), process)
            return enqueued

    with (
        psycopg.connect(target, autocommit=True) as conn,
        worker_process(WORKER, target, "--concurrency", "10") as process,
    ):
        enqueued = run(go(conn, process))
    return latency_result(target, enqueued)
