"""One PgQueuer worker process for the benchmarks (run by `pgqueuer_bench`).

    python -m benchmarks.peers.pgqueuer_worker --dsn DSN --concurrency N [--batch-size B]

Runs a QueueManager through ``pgqueuer.run`` (what ``pgq run`` does: uvloop, SIGINT/SIGTERM
stop it cleanly) with one no-op ``async def`` entrypoint that logs each execution.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import pgqueuer
from pgqueuer import Job, QueueManager

from benchmarks.peers._common import Recorder
from benchmarks.peers.pgqueuer_bench import ENTRYPOINT, batch_size, connect, run


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers.pgqueuer_worker")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--concurrency", type=int, required=True, help="max_concurrent_tasks")
    parser.add_argument(
        "--batch-size", type=int, default=0, help="default: the largest allowed (concurrency/2)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    # ``pgq run`` logs every start at INFO; the pgtasks workers run at WARNING too.
    logging.getLogger("pgqueuer").setLevel(logging.WARNING)
    concurrency = max(2, args.concurrency)
    batch = args.batch_size or batch_size(concurrency)
    recorder = Recorder(args.dsn)

    @asynccontextmanager
    async def factory() -> AsyncIterator[QueueManager]:
        queries, close = await connect(args.dsn)
        manager = QueueManager(queries)

        @manager.entrypoint(ENTRYPOINT)
        async def noop(job: Job) -> None:
            started = time.time()
            recorder.record(str(job.id), started, time.time())

        try:
            yield manager
        finally:
            await close()

    async def go() -> None:
        await pgqueuer.run(
            factory,
            batch_size=batch,
            max_concurrent_tasks=concurrency,
            dequeue_timeout=timedelta(seconds=30),
        )

    try:
        run(go())
    finally:
        recorder.close()


if __name__ == "__main__":
    main()
