"""What job logs (pgtasks/_execution/joblogs.py) cost a worker: jobs/s with them on and
off, for a task that logs nothing and for one that logs 10 lines.

    python -m benchmarks.job_logs [--dsn DSN] [--jobs N] [--runs R] [--concurrency C]

One schema; each round enqueues N jobs of one task (``delay_many``), then an in-process
``Worker(concurrency=C)`` (thread executor, default settings) drains them: the figure is
N over the time from the worker's start to the moment every job is done in the database
(read every 20 ms). The four cases run in alternating order each round (the machine's
load moves figures between runs: compare within one run); each figure is the median of
the rounds, with the ratio on/off per task. The logging task writes 10 WARNING lines
through ``logging`` (one argument each); the root logger has a NullHandler, so logs off
costs only the logging calls themselves (no console output on either side).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import threading
import time

import psycopg
from psycopg import sql

from benchmarks.__main__ import resolve_dsn
from pgtasks import App, Worker

SCHEMA = "pgtasks_bench_job_logs"
CASES = (("quiet", True), ("quiet", False), ("logs 10 lines", True), ("logs 10 lines", False))
logger = logging.getLogger("bench.job_logs")


def fresh_app(dsn: str) -> App:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    app = App(dsn, schema=SCHEMA, pool_max_size=4)
    app.migrate()

    @app.task(name="quiet")
    def quiet(n: int) -> None:
        return None

    @app.task(name="logs 10 lines")
    def chatty(n: int) -> None:
        for line in range(10):
            logger.warning("job %d line %d", n, line)

    return app


def drain(app: App, task: str, jobs: int, concurrency: int, job_logs: bool) -> float:
    """Jobs/s of one worker draining ``jobs`` jobs of ``task``."""
    app.tasks[task].delay_many([{"n": n} for n in range(jobs)])
    worker = Worker(app, concurrency=concurrency, job_logs=job_logs)
    thread = threading.Thread(target=worker.run, daemon=True)
    started = time.perf_counter()
    thread.start()
    with psycopg.connect(app.database.dsn, autocommit=True) as conn:
        query = sql.SQL("SELECT count(*) FROM {}.jobs").format(sql.Identifier(SCHEMA))
        while True:
            row = conn.execute(query).fetchone()
            if row is not None and row[0] == 0:
                break
            time.sleep(0.02)
    elapsed = time.perf_counter() - started
    worker.stop(timeout=5.0)
    thread.join(10)
    return jobs / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.job_logs")
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--jobs", type=int, default=5000, help="jobs per drain")
    parser.add_argument("--runs", type=int, default=5, help="rounds (median)")
    parser.add_argument("--concurrency", type=int, default=10, help="worker threads")
    args = parser.parse_args(argv)
    logging.getLogger().addHandler(logging.NullHandler())
    logging.getLogger().setLevel(logging.WARNING)
    logging.getLogger("pgtasks").setLevel(logging.ERROR)  # the worker's own start/stop lines
    dsn = resolve_dsn(args.dsn)
    app = fresh_app(dsn)
    results: dict[tuple[str, bool], list[float]] = {case: [] for case in CASES}
    try:
        for round_number in range(args.runs):
            order = CASES if round_number % 2 == 0 else tuple(reversed(CASES))
            for task, job_logs in order:
                rate = drain(app, task, args.jobs, args.concurrency, job_logs)
                results[(task, job_logs)].append(rate)
        print(
            f"rounds: {args.runs} (median jobs/s), {args.jobs} jobs per drain,"
            f" concurrency {args.concurrency}"
        )
        print(f"{'task':16} {'logs on':>10} {'logs off':>10} {'on/off':>7}")
        for task in ("quiet", "logs 10 lines"):
            on = statistics.median(results[(task, True)])
            off = statistics.median(results[(task, False)])
            print(f"{task:16} {on:>10,.0f} {off:>10,.0f} {on / off:>7.3f}")
    finally:
        app.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
