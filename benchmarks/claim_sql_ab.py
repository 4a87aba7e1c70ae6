"""The worker's claim and finish statements of two checkouts, round trip by round trip.

    python -m benchmarks.claim_sql_ab --baseline /path/to/other/checkout [--dsn DSN]
                                      [--jobs 40000] [--batch 32] [--runs 3]

One process, one connection (the worker's settings), one schema: N pre-enqueued no-op
jobs are drained by round trips that alternate between this checkout's statements and the
baseline's (``claim_jobs``, ``claim_jobs_after``, ``finish_jobs`` read from its
``pgtasks/sql/*.sql``), so both meet the same table, the same server and the same load at
the same moments: the steadiest comparison a shared machine allows. Two shapes
of round trip: ``pipeline`` (a busy worker: the outcomes of the last batch and the next
claim in one transaction) and ``claim only`` (an idle worker claiming new jobs: a claim
alone, autocommit; the finish that follows is not timed). Prints the median and mean
round trip of each side per run, and the median over runs of their ratio.

Not a test: nothing here fails a build.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.__main__ import print_setting, resolve_dsn
from pgtasks import App
from pgtasks._leases import ClaimPosition, ClaimRequest, Finish
from pgtasks._retry import Outcome
from pgtasks._store.base import _TEXT_PLACEHOLDER, ANNOUNCED_CLAIMS
from pgtasks._store.queries import Queries
from pgtasks._worker.connection import WORKER_CONNECTION_OPTIONS
from pgtasks.sql import parse_queries

SCHEMA = "pgtasks_bench_claim_sql_ab"
STATEMENTS = ("claim_jobs", "claim_jobs_after", "finish_jobs")


def baseline_store(checkout: Path) -> Queries:
    """A Queries whose claim and finish statements are the baseline checkout's."""
    queries = {
        name: query
        for path in sorted((checkout / "pgtasks" / "sql").glob("*.sql"))
        for name, query in parse_queries(path.read_text("utf-8")).items()
    }
    store = Queries(SCHEMA)
    for name in STATEMENTS:
        text = store._render(queries[name].text)
        store._statements[name] = text
        store._binary_statements[name] = _TEXT_PLACEHOLDER.sub(rb"%(\1)b", text)
        if name in ANNOUNCED_CLAIMS:
            # The baseline announces no claim: its claim alone is its plain claim.
            store._statements[f"{name}_announced"] = text
    return store


def drain(
    dsn: str,
    enqueue: Callable[[int], None],
    stores: dict[str, Queries],
    jobs: int,
    batch: int,
    shape: str,
) -> dict[str, list[float]]:
    """Round trip times (ms) per side while N jobs are drained, the sides alternating."""
    for start in range(0, jobs, 5000):
        enqueue(min(5000, jobs - start))
    times: dict[str, list[float]] = {name: [] for name in stores}
    sides = list(stores.items())
    with psycopg.connect(dsn, autocommit=True, options=WORKER_CONNECTION_OPTIONS) as conn:
        first = sides[0][1]
        worker = first.register_worker(
            conn, hostname="bench", pid=0, queues=None, concurrency=batch
        )
        finished: list[Finish] = []
        position: ClaimPosition | None = None
        trip = 0
        while True:
            name, store = sides[trip % len(sides)]
            trip += 1
            if shape == "claim only" and finished:
                store.finish_jobs(conn, finished)
                finished = []
            started = time.perf_counter()
            claim = ClaimRequest(worker, batch, after=position)
            jobs = store.finish_and_claim_jobs(conn, finished, claim).claimed
            times[name].append((time.perf_counter() - started) * 1000)
            if not jobs:
                break
            position = jobs[-1].position
            finished = [Finish.of(job, Outcome.done("null")) for job in jobs]
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.claim_sql_ab", description=__doc__)
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout")
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--jobs", type=int, default=40_000, help="jobs drained per run")
    parser.add_argument("--batch", type=int, default=32, help="jobs per claim")
    parser.add_argument("--runs", type=int, default=3, help="runs per shape")
    args = parser.parse_args(argv)
    dsn = resolve_dsn(args.dsn)
    print_setting(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    app = App(dsn, schema=SCHEMA)
    app.migrate()

    @app.task(name="bench.noop")
    def noop() -> None: ...

    def enqueue(count: int) -> None:
        noop.delay_many([{}] * count)

    stores = {"this": app.queries, "baseline": baseline_store(args.baseline.resolve())}
    print(f"this: {Path(__file__).resolve().parent.parent}\nbaseline: {args.baseline.resolve()}")
    print(f"{args.jobs:,} jobs per run, {args.batch} a claim; round trip times in ms")
    for shape in ("pipeline", "claim only"):
        ratios: dict[str, list[float]] = {"median": [], "mean": []}
        for run in range(args.runs):
            # Which side goes first alternates from run to run.
            order = stores if run % 2 == 0 else dict(reversed(list(stores.items())))
            times = drain(dsn, enqueue, order, args.jobs, args.batch, shape)
            summary: dict[str, Any] = {}
            for name, values in times.items():
                kept = values[5:-5] or values  # the first and last trips are odd ones
                summary[name] = (statistics.median(kept), statistics.fmean(kept), len(kept))
            this, baseline = summary["this"], summary["baseline"]
            ratios["median"].append(this[0] / baseline[0])
            ratios["mean"].append(this[1] / baseline[1])
            print(
                f"{shape:10} run {run + 1}: this median {this[0]:.3f} mean {this[1]:.3f},"
                f" baseline median {baseline[0]:.3f} mean {baseline[1]:.3f}"
                f" ({this[2]} trips each)"
            )
        print(
            f"{shape:10} this/baseline over {args.runs} runs: median trip"
            f" {statistics.median(ratios['median']):.3f}, mean trip"
            f" {statistics.median(ratios['mean']):.3f}"
        )
    app.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
