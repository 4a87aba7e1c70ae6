"""PgQueuer 1.6.0 beside pgtasks: same shapes as the pgtasks runner's functions.

Configuration, from PgQueuer's own docs (docs/guides/performance-tuning.md) and benchmark
(tools/benchmark.py):
- asyncpg driver on one direct connection for the QueueManager ("Always use a direct
  asyncpg connection (not a pool) for the QueueManager"); uvloop, as ``pgq run`` uses;
- ``max_concurrent_tasks`` = the concurrency, ``batch_size`` = the largest it allows
  (``max_concurrent_tasks`` must be at least ``2 x batch_size``): bigger batches for short
  jobs, fewer dequeue round trips;
- ``pgq autovac`` settings applied after install (the docs' checklist); durability left
  at the default ``durable`` (the benchmark server is durable, and so is pgtasks);
- an ``async def`` entrypoint (native to PgQueuer; sync ones go through a thread pool).
Enqueue uses ``Queries.enqueue``: a scalar call per job, or lists of 1000 for the batch API.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import psycopg

from benchmarks.peers._common import (
    Drain,
    asyncpg_arguments,
    drain_result,
    latency_result,
    reset_database,
    wait_for_keys,
    wait_until_idle,
    worker_process,
)

DATABASE = "bench_pgqueuer"
ENTRYPOINT = "noop"
WORKER = "benchmarks.peers.pgqueuer_worker"
BATCH = 1000

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run on uvloop when it is there (``pgq run`` does), else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


def has_asyncpg() -> bool:
    try:
        import asyncpg  # noqa: F401
    except ImportError:
        return False
    return True


async def connect(dsn: str) -> tuple[Any, Callable[[], Awaitable[None]]]:
    """``(Queries, close)`` on asyncpg when installed, else on psycopg's async connection."""
    from pgqueuer import Queries

    if has_asyncpg():
        import asyncpg
        from pgqueuer import AsyncpgDriver

        conn = await asyncpg.connect(**asyncpg_arguments(dsn))
        return Queries(AsyncpgDriver(conn)), conn.close
    from pgqueuer import PsycopgDriver

    aconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    return Queries(PsycopgDriver(aconn)), aconn.close


def install(dsn: str) -> str:
    """A fresh ``bench_pgqueuer_<db>`` database with PgQueuer's schema; return its DSN."""
    target = reset_database(dsn, DATABASE)

    async def go() -> None:
        queries, close = await connect(target)
        try:
            await queries.install()
            await queries.optimize_autovacuum()
        finally:
            await close()

    run(go())
    return target


async def enqueue_batches(queries: Any, count: int) -> list[str]:
    keys: list[str] = []
    for start in range(0, count, BATCH):
        size = min(BATCH, count - start)
        ids = await queries.enqueue([ENTRYPOINT] * size, [None] * size, [0] * size)
        keys.extend(str(job_id) for job_id in ids)
    return keys


# -- enqueue -------------------------------------------------------------------------------------
def enqueue_one_by_one(dsn: str, count: int) -> float:
    target = install(dsn)

    async def go() -> float:
        queries, close = await connect(target)
        try:
            started = time.perf_counter()
            for _ in range(count):
                await queries.enqueue(ENTRYPOINT, None)
            return count / (time.perf_counter() - started)
        finally:
            await close()

    return run(go())


def enqueue_bulk(dsn: str, count: int) -> float:
    target = install(dsn)
    batches = max(1, count // BATCH)

    async def go() -> float:
        queries, close = await connect(target)
        try:
            started = time.perf_counter()
            await enqueue_batches(queries, batches * BATCH)
            return batches * BATCH / (time.perf_counter() - started)
        finally:
            await close()

    return run(go())


# -- processing ----------------------------------------------------------------------------------
def batch_size(concurrency: int) -> int:
    """The largest batch PgQueuer allows under ``max_concurrent_tasks`` (2 x batch_size)."""
    return max(1, concurrency // 2)


def worker_note(concurrency: int) -> str:
    driver = "asyncpg" if has_asyncpg() else "psycopg"
    return f"{driver}, batch_size {batch_size(concurrency)}, max_concurrent_tasks {concurrency}"


def worker_arguments(concurrency: int) -> list[str]:
    return ["--concurrency", str(concurrency)]


def processing(dsn: str, jobs: int, concurrency: int) -> Drain:
    target = install(dsn)

    async def fill() -> list[str]:
        queries, close = await connect(target)
        try:
            return await enqueue_batches(queries, jobs)
        finally:
            await close()

    keys = set(run(fill()))
    with (
        psycopg.connect(target, autocommit=True) as conn,
        worker_process(WORKER, target, *worker_arguments(concurrency)) as process,
    ):
        wait_for_keys(conn, keys, process)
    return drain_result(target, keys)


# -- latency -------------------------------------------------------------------------------------
def idle_latency(dsn: str, count: int, gap: float) -> tuple[float, float, float]:
    target = install(dsn)

    async def enqueue_one(queries: Any) -> str:
        ids = await queries.enqueue(ENTRYPOINT, None)
        return str(ids[0])

    async def go(conn: psycopg.Connection[Any], process: Any) -> dict[str, float]:
        queries, close = await connect(target)
        try:
            warm_up = await enqueue_one(queries)
            await asyncio.to_thread(wait_until_idle, conn, warm_up, process)
            enqueued: dict[str, float] = {}
            for _ in range(count):
                at = time.time()
                enqueued[await enqueue_one(queries)] = at
                await asyncio.sleep(gap)
            await asyncio.to_thread(wait_for_keys, conn, set(enqueued), process)
            return enqueued
        finally:
            await close()

    with (
        psycopg.connect(target, autocommit=True) as conn,
        worker_process(WORKER, target, *worker_arguments(10)) as process,
    ):
        enqueued = run(go(conn, process))
    return latency_result(target, enqueued)
