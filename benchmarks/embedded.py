"""One asyncio program that drains pre-enqueued jobs with a worker inside it (``--in-process``).

    python -m benchmarks.embedded --dsn DSN --jobs N --concurrency C --mode MODE --task KIND

How a FastAPI/ASGI service, a notebook or a test runs a worker: the program's own asyncio
loop runs in the main thread, and the worker runs beside it, in the same process:

- ``--mode thread``: ``await asyncio.to_thread(Worker(app, concurrency=C).run)``;
- ``--mode arun``: ``await Worker(app, concurrency=C).arun()`` (the async entry point);
- ``--mode pgqueuer``: ``PgQueuer(AsyncpgDriver(conn)).run(batch_size=C)`` on the same loop
  (the peer row; ``max_concurrent_tasks`` left unlimited, as the issue's harness ran it).

The jobs are bulk-enqueued before the worker starts (argument ``i`` for job ``i``); the task
body records its argument in a dict under a ``threading.Lock`` (``--task sync``: a plain
function, on pgtasks' job threads; ``--task async``: an ``async def``). App and Worker keep
their default settings, and logging stays unconfigured (``--log-level`` configures the root
logger as a program might). The program waits on its own loop, reading the database every
``--wait-interval`` seconds, until all N jobs are done, then stops the worker.

It prints one JSON object: ``rate`` = N / (first task start -> the program sees all N done
in the database); ``db_rate`` (pgtasks only) = N / (first claim -> last finish, the
database's own timestamps, as the CLI rows of the runner); ``duplicates`` (arguments
recorded more than once, plus claims beyond one per job) and ``lost`` (never recorded).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import resource
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

SCHEMA = os.environ.get("PGTASKS_SCHEMA", "pgtasks_bench")


class Record:
    """What the task bodies saw: argument -> times recorded, and the first start."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[int, int] = {}
        self.first_start = 0.0

    def add(self, value: int) -> None:
        now = time.time()
        with self.lock:
            if not self.first_start:
                self.first_start = now
            self.seen[value] = self.seen.get(value, 0) + 1

    def outcome(self, jobs: int) -> tuple[int, int]:
        with self.lock:
            duplicates = sum(count - 1 for count in self.seen.values())
            lost = sum(1 for value in range(jobs) if value not in self.seen)
        return duplicates, lost


def process_cpu() -> float:
    """CPU seconds of this process so far (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.embedded")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--mode", choices=("thread", "arun", "pgqueuer"), required=True)
    parser.add_argument("--task", choices=("sync", "async"), default="sync")
    parser.add_argument("--wait-interval", type=float, default=0.05)
    parser.add_argument("--prefetch", type=int, default=None, help="Worker(prefetch=) (diagnosis)")
    parser.add_argument("--log-level", default=None, help="configure the root logger (basicConfig)")
    parser.add_argument("--uvloop", action="store_true", help="run the program on uvloop")
    parser.add_argument(
        "--switch-interval", type=float, default=None, help="sys.setswitchinterval (diagnosis)"
    )
    return parser.parse_args(argv)


async def wait_until(
    done: Callable[[], Awaitable[int]], jobs: int, interval: float, timeout: float = 600.0
) -> float:
    """Poll ``done()`` on the loop until it reaches ``jobs``; the time it did."""
    deadline = time.monotonic() + timeout
    while await done() < jobs:
        if time.monotonic() > deadline:
            raise RuntimeError(f"not drained within {timeout:g} s")
        await asyncio.sleep(interval)
    return time.time()


# -- pgtasks -------------------------------------------------------------------------------------
async def run_pgtasks(args: argparse.Namespace, record: Record) -> dict[str, Any]:
    import psycopg
    from psycopg import sql

    from pgtasks import App, Worker

    app = App(dsn=args.dsn, schema=SCHEMA)
    if args.task == "sync":

        @app.task(name="embedded.record")
        def record_sync(value: int) -> None:
            record.add(value)

        target: Any = record_sync
    else:

        @app.task(name="embedded.record")
        async def record_async(value: int) -> None:
            record.add(value)

        target = record_async
    for start in range(0, args.jobs, 5000):
        target.delay_many([([i], {}) for i in range(start, min(args.jobs, start + 5000))])
    options: dict[str, Any] = {} if args.prefetch is None else {"prefetch": args.prefetch}
    worker = Worker(app, concurrency=args.concurrency, **options)
    jobs = sql.Identifier(SCHEMA, "all_jobs")
    async with await psycopg.AsyncConnection.connect(args.dsn, autocommit=True) as conn:

        async def done() -> int:
            cursor = await conn.execute(
                sql.SQL("SELECT count(*) FROM {} WHERE status = 'done'").format(jobs)
            )
            row = await cursor.fetchone()
            return int(row[0]) if row else 0

        cpu_before = process_cpu()
        if args.mode == "arun":
            running = asyncio.ensure_future(worker.arun())
        else:
            running = asyncio.ensure_future(asyncio.to_thread(worker.run))
        try:
            finished = await wait_until(done, args.jobs, args.wait_interval)
            drain_cpu = process_cpu() - cpu_before
        finally:
            if args.mode == "arun":
                running.cancel()
            else:
                worker.stop(wait=False)
            with contextlib.suppress(asyncio.CancelledError):
                await running
        cursor = await conn.execute(
            sql.SQL(
                "SELECT extract(epoch FROM max(finished_at) - min(locked_at)),"
                " coalesce(sum(attempts - 1) FILTER (WHERE attempts > 1), 0) FROM {}"
            ).format(jobs)
        )
        row = await cursor.fetchone()
    app.close()
    assert row is not None
    duplicates, lost = record.outcome(args.jobs)
    return {
        "rate": args.jobs / (finished - record.first_start),
        "db_rate": args.jobs / float(row[0]),
        "drain_cpu_us_per_job": drain_cpu / args.jobs * 1e6,
        "duplicates": duplicates + int(row[1]),
        "lost": lost,
        "threads_left": sorted(
            thread.name for thread in threading.enumerate() if thread.name.startswith("pgtasks")
        ),
    }


# -- PgQueuer on the same loop -------------------------------------------------------------------
async def run_pgqueuer(args: argparse.Namespace, record: Record) -> dict[str, Any]:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Job, PgQueuer, Queries

    from benchmarks.peers._common import asyncpg_arguments

    conn = await asyncpg.connect(**asyncpg_arguments(args.dsn))
    producer = await asyncpg.connect(**asyncpg_arguments(args.dsn))
    try:
        queries = Queries(AsyncpgDriver(producer))
        for start in range(0, args.jobs, 1000):
            size = min(1000, args.jobs - start)
            payloads: list[bytes | None] = [str(i).encode() for i in range(start, start + size)]
            await queries.enqueue(["record"] * size, payloads, [0] * size)
        pgq = PgQueuer(AsyncpgDriver(conn))

        # PgQueuer 1.6 takes ``async def`` entrypoints only; the body is the same plain call.
        @pgq.entrypoint("record")
        async def record_job(job: Job) -> None:
            record.add(int(job.payload or b"-1"))

        async def done() -> int:
            # PgQueuer deletes a job's row when it is done (and logs it).
            pending = await producer.fetchval("SELECT count(*) FROM pgqueuer")
            return int(args.jobs - int(pending))

        cpu_before = process_cpu()
        running = asyncio.ensure_future(pgq.run(batch_size=args.concurrency))
        try:
            finished = await wait_until(done, args.jobs, args.wait_interval)
            drain_cpu = process_cpu() - cpu_before
        finally:
            pgq.shutdown.set()
            await running
    finally:
        await conn.close()
        await producer.close()
    duplicates, lost = record.outcome(args.jobs)
    return {
        "rate": args.jobs / (finished - record.first_start),
        "db_rate": None,
        "drain_cpu_us_per_job": drain_cpu / args.jobs * 1e6,
        "duplicates": duplicates,
        "lost": lost,
        "threads_left": [],
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.log_level:
        logging.basicConfig(level=args.log_level.upper())
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    record = Record()
    runner = run_pgqueuer if args.mode == "pgqueuer" else run_pgtasks
    if args.uvloop:
        import uvloop

        result = uvloop.run(runner(args, record))
    else:
        result = asyncio.run(runner(args, record))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result["cpu_us_per_job"] = (usage.ru_utime + usage.ru_stime) / args.jobs * 1e6
    result["context_switches"] = usage.ru_nvcsw + usage.ru_nivcsw
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
