"""What the counters of exercised guarantees cost, with and without them (``--counters``).

    python -m benchmarks --counters [--dsn DSN] [--jobs N] [--runs R] [--quick]

The counters count rare events, so they are measured where those events are made as
frequent as they can be, in alternating rounds (median of R):

- **deduplicated enqueues**: ``apply_async(idempotency_key=…)`` one by one where every
  call finds its key taken (each fires the counting trigger of migration 0014), against
  the same calls on a schema without that trigger; and, as a check that the trigger
  costs nothing otherwise, keyed enqueues of new keys on both schemas;
- **a worker's counts**: a worker releasing N jobs of a task its process-pool children
  lack (each one counted as an unknown-task job, in memory, stored with the heartbeat,
  here every 0.1 s instead of 5 s), against the same drain with the counting switched
  off (``Reporter.exercised`` a no-op), throughput from the jobs' own timestamps.

Each pair takes turns in blocks within a round (one by one: 100 calls; drains: one each),
the order reversed at each turn.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pgtasks import App, Worker
from pgtasks._worker.reporter import Reporter

ROOT = Path(__file__).resolve().parent.parent
WITH, WITHOUT = "pgtasks_bench_counters", "pgtasks_bench_no_counters"
BLOCK = 100


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks --counters", description=__doc__)
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain")
    parser.add_argument("--runs", type=int, default=3, help="rounds (median)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round")
    parser.add_argument(
        "--json", default=str(ROOT / "benchmarks" / "results" / "counters.json"), help="output"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.runs = 300, 1
    return args


def fresh_app(dsn: str, schema: str, *, trigger: bool) -> App:
    """A migrated schema; without the counting trigger of migration 0014 unless ``trigger``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    app = App(dsn, schema=schema, pool_max_size=2)
    app.migrate()
    if not trigger:
        with app.connection() as conn:
            conn.execute(
                sql.SQL("DROP TRIGGER jobs_count_deduplicated ON {}").format(
                    sql.Identifier(schema, "jobs")
                )
            )
    return app


def keyed_enqueues(dsn: str, calls: int) -> dict[str, float]:
    """Keyed enqueues one by one, taking turns: jobs/s with and without the trigger."""
    apps = {
        "with": fresh_app(dsn, WITH, trigger=True),
        "without": fresh_app(dsn, WITHOUT, trigger=False),
    }
    tasks = {name: app.task(name="bench.keyed")(lambda n: n) for name, app in apps.items()}
    for task in tasks.values():
        task.apply_async((0,), idempotency_key="taken")
    spent: dict[str, float] = {}
    fresh = iter(range(10**9))
    for index in range(max(1, calls // BLOCK)):
        for name in ("with", "without") if index % 2 == 0 else ("without", "with"):
            task = tasks[name]
            started = time.perf_counter()
            for _ in range(BLOCK):
                task.apply_async((1,), idempotency_key="taken")
            taken = time.perf_counter() - started
            started = time.perf_counter()
            for _ in range(BLOCK):
                task.apply_async((1,), idempotency_key=f"new:{next(fresh)}")
            new = time.perf_counter() - started
            for label, seconds in ((f"key taken, {name}", taken), (f"new key, {name}", new)):
                spent[label] = spent.get(label, 0.0) + seconds
    counted = apps["with"].database.run(apps["with"].queries.get_counters)
    assert counted.get("enqueues_deduplicated") == max(1, calls // BLOCK) * BLOCK, counted
    for app in apps.values():
        app.close()
    return {label: max(1, calls // BLOCK) * BLOCK / seconds for label, seconds in spent.items()}


@contextmanager
def counting(enabled: bool) -> Iterator[None]:
    """The worker's counting as it is, or switched off (the reference)."""
    if enabled:
        yield
        return
    original = Reporter.exercised
    Reporter.exercised = lambda self, name, amount=1, *, store=True: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        Reporter.exercised = original  # type: ignore[method-assign]


def drain_unknown(dsn: str, jobs: int, *, enabled: bool) -> float:
    """A worker releases ``jobs`` jobs of a task its process-pool children lack (registered
    after they forked; workers claim only the tasks they know, so this is where jobs of
    unknown tasks are met and counted): jobs/s, first claim to last release by the
    database's clock."""
    app = fresh_app(dsn, WITH, trigger=True)
    # A job the children run first: they are forked when the pool first needs them.
    warm = app.task(name="bench.warm")(lambda: None)
    with App(dsn, schema=WITH) as producer:
        late = producer.task(name="bench.late")(lambda: None)
        for start in range(0, jobs, 5000):
            late.delay_many([{}] * min(5000, jobs - start))
    worker = Worker(
        app,
        concurrency=10,
        heartbeat_interval=0.1,
        rescue_interval=60.0,
        pool="process",
        processes=2,
        process_start_method="fork",
    )
    with counting(enabled):
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while worker.worker_id is None:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the worker did not start")
            time.sleep(0.01)
        warm.delay().get(timeout=60)
        # Known to the worker from now on, never to its children (forked before).
        app.task(name="bench.late")(lambda: None)
        jobs_table = sql.Identifier(WITH, "all_jobs")
        with psycopg.connect(dsn, autocommit=True) as conn:
            deadline = time.monotonic() + 600
            while True:
                row = conn.execute(
                    sql.SQL(
                        "SELECT count(*) FROM {} WHERE task_name = 'bench.late'"
                        " AND status = 'pending' AND attempts = 1"
                    ).format(jobs_table)
                ).fetchone()
                if row is not None and row[0] >= jobs:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("the drain did not end in 600 s")
                time.sleep(0.05)
            worker.stop(timeout=5)
            thread.join(30)
            row = conn.execute(
                sql.SQL(
                    "SELECT extract(epoch FROM max(updated_at) - min(started_at)) FROM {}"
                    " WHERE task_name = 'bench.late'"
                ).format(jobs_table)
            ).fetchone()
    assert row is not None
    stored = app.database.run(app.queries.get_counters).get("unknown_task_jobs", 0)
    expected = jobs if enabled else 0
    assert stored == expected, f"{stored} unknown-task jobs stored, {expected} expected"
    app.close()
    return jobs / float(row[0])


def main(argv: list[str]) -> int:
    from benchmarks import __main__ as runner

    args = parse_args(argv)
    dsn = runner.resolve_dsn(args.dsn)
    facts = runner.print_setting(dsn)
    calls = max(200, args.jobs // 10)
    print(
        f"keyed enqueues: {calls} per figure and round; drains: {args.jobs} jobs;"
        f" rounds: {args.runs}; load average before: "
        + " ".join(f"{value:.2f}" for value in os.getloadavg())
        + "\n",
        flush=True,
    )
    rates: dict[str, list[float]] = {}

    def add(name: str, rate: float) -> None:
        rates.setdefault(name, []).append(rate)

    drains: list[tuple[str, Callable[[], float]]] = [
        (
            "drain of unknown-task jobs, counted",
            lambda: drain_unknown(dsn, args.jobs, enabled=True),
        ),
        (
            "drain of unknown-task jobs, not counted",
            lambda: drain_unknown(dsn, args.jobs, enabled=False),
        ),
    ]
    for round_number in range(args.runs):
        for name, rate in keyed_enqueues(dsn, calls).items():
            add(name, rate)
        for name, run in drains if round_number % 2 == 0 else drains[::-1]:
            add(name, run())
        print(f"round {round_number + 1} of {args.runs} done", flush=True)
    print(f"\ncounters (median of {args.runs} round(s), jobs/s)")
    for name, values in rates.items():
        low, high = min(values), max(values)
        print(f"{name:42} {statistics.median(values):>9,.0f} [{low:,.0f} .. {high:,.0f}]")
    comparisons = (
        ("key taken, with", "key taken, without"),
        ("new key, with", "new key, without"),
        ("drain of unknown-task jobs, counted", "drain of unknown-task jobs, not counted"),
    )
    print("\nratios (with the counters / without, same run)")
    ratios: list[dict[str, Any]] = []
    for figure, reference in comparisons:
        ratio = statistics.median(rates[figure]) / statistics.median(rates[reference])
        print(f"{figure:42} / {reference:42} {ratio:6.1%}")
        ratios.append({"figure": figure, "reference": reference, "ratio": ratio})
    print("load average after: " + " ".join(f"{value:.2f}" for value in os.getloadavg()))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(
        json.dumps({"postgres": facts, "rates": rates, "ratios": ratios}, indent=2)
    )
    print(f"\nwritten: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
