"""Flow control's cost on a worker's drain: plain no-op jobs against the same drain with
debounce keys, with start deadlines (expires=) and through a batch handler of 500.

    python -m benchmarks.flow [--dsn DSN] [--jobs N] [--rounds R] [--concurrency C]

One schema. Each round runs every variant once, in an order rotated from round to round:
N jobs of the variant's task are enqueued with no worker running (not timed), then one
in-process Worker (thread executor, concurrency C) drains them. The drain's rate is the
jobs divided by the database's span from the first job's start (started_at) to the last
one's end (finished_at): the worker's start and stop are left out. Variants:

* plain: ``noop.delay_many`` jobs;
* debounce: each job enqueued with its own debounce key (debounce=1 ms, so all are due
  when the drain starts): rows with the "pgtasks.debounce" meta, in jobs_debounce_idx
  until claimed;
* expires: each job with expires=3600 s (meta "pgtasks.expires", read by every claim);
* batch: a batch task, Batch(max_size=500, max_wait=1 s), whose handler does nothing.

Prints each variant's median jobs/s, its ratio to plain's median, and the median of
its per-round ratios to the plain drain of the same round.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from datetime import timedelta

import psycopg
from psycopg import sql

from benchmarks.__main__ import resolve_dsn
from pgtasks import App, Batch, BatchJob, Worker
from pgtasks._app.debounce import Debounce

SCHEMA = "pgtasks_bench_flow"
VARIANTS = ("plain", "debounce", "expires", "batch")


def fresh_app(dsn: str) -> App:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    app = App(dsn, schema=SCHEMA, pool_max_size=4)
    app.migrate()

    @app.task(name="flow.plain")
    def plain(n: int) -> None: ...

    @app.task(name="flow.debounce")
    def debounced(n: int) -> None: ...

    @app.task(name="flow.expires", expires=3600)
    def expiring(n: int) -> None: ...

    @app.task(name="flow.batch", batch=Batch(max_size=500, max_wait=timedelta(seconds=1)))
    def batch(jobs: list[BatchJob]) -> None: ...

    return app


def enqueue(app: App, variant: str, jobs: int) -> None:
    task = app.tasks[f"flow.{variant}"]
    if variant != "debounce":
        for start in range(0, jobs, 5000):
            task.delay_many([{"n": n} for n in range(start, min(jobs, start + 5000))])
        return
    for start in range(0, jobs, 1000):
        specs = [
            task.build_spec([n], debounce=Debounce(timedelta(milliseconds=1), f"key-{n}"))
            for n in range(start, min(jobs, start + 1000))
        ]
        app.enqueue_many(specs)  # one transaction per 1000 keys
    time.sleep(0.01)  # every job due


def drain(app: App, variant: str, jobs: int, concurrency: int) -> float:
    """Jobs/s of one drain, by the database's clock."""
    worker = Worker(app, concurrency=concurrency, poll_interval=0.2)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        with psycopg.connect(app.dsn, autocommit=True) as conn:
            left = sql.SQL("SELECT count(*) FROM {}.jobs").format(sql.Identifier(SCHEMA))
            deadline = time.monotonic() + 600
            while conn.execute(left).fetchone()[0]:  # type: ignore[index]
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{variant}: the drain did not end in 600 s")
                # The rate comes from the jobs' timestamps: polling more often only loads
                # the server (every 20 ms cost 5 to 8 us of its time per job drained).
                time.sleep(0.25)
            span = conn.execute(
                sql.SQL(
                    "SELECT extract(epoch FROM max(finished_at) - min(started_at)), count(*),"
                    " count(*) FILTER (WHERE status <> 'done') FROM {}.jobs_history"
                    " WHERE task_name = %s"
                ).format(sql.Identifier(SCHEMA)),
                (f"flow.{variant}",),
            ).fetchone()
            assert span is not None
            seconds, count, not_done = float(span[0]), int(span[1]), int(span[2])
            if count != jobs or not_done:
                raise RuntimeError(f"{variant}: {count} jobs ended, {not_done} not done")
            conn.execute(sql.SQL("TRUNCATE {}.jobs_history").format(sql.Identifier(SCHEMA)))
    finally:
        worker.stop()
        thread.join(60)
    return jobs / seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=10)
    options = parser.parse_args(argv)
    dsn = resolve_dsn(options.dsn)
    app = fresh_app(dsn)
    rates: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    try:
        for index in range(options.rounds):
            order = VARIANTS[index % len(VARIANTS) :] + VARIANTS[: index % len(VARIANTS)]
            for variant in order:
                enqueue(app, variant, options.jobs)
                rate = drain(app, variant, options.jobs, options.concurrency)
                rates[variant].append(rate)
                print(f"round {index + 1} {variant:9s} {rate:9.0f} jobs/s", flush=True)
    finally:
        app.close()
    plain = statistics.median(rates["plain"])
    print(f"\nmedians of {options.rounds} rounds, {options.jobs} jobs each (and the median of")
    print("each round's ratio to that round's plain drain, steadier on a shared machine):")
    for variant in VARIANTS:
        median = statistics.median(rates[variant])
        ratios = [rate / base for rate, base in zip(rates[variant], rates["plain"], strict=True)]
        print(
            f"{variant:9s} {median:9.0f} jobs/s  {median / plain:6.2f}x plain"
            f"  (per round: {statistics.median(ratios):.2f}x;"
            f" {', '.join(f'{ratio:.2f}' for ratio in ratios)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
