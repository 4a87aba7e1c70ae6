"""What migration 0010's uniqueness indexes cost plain jobs, on the server.

    python -m benchmarks.unique_overhead [--dsn DSN] [--jobs N] [--runs R]

Two schemas on one server, both migrated by this checkout; in ``without``, the objects
of migration 0010 that plain jobs pay for (the check and the unique indexes on
jobs.unique_key and jobs.unique_window) are dropped again; the two columns stay (always
NULL for plain jobs: jobs_history, the all_jobs view and the finish list them). The
same code then runs, in alternating order each round, the
statements of plain jobs (no key, no scope) against each: N one-job inserts in one
transaction (the statement of ``apply_async(connection=...)``; no commit per job, so
the disk's commit latency does not drown the difference), bulk inserts (``delay_many``),
and the worker's claim-and-finish loop (``finish_and_claim_jobs``, batches of 50) over
those jobs. Prints medians of jobs/s and the ratio with/without.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import psycopg
from psycopg import sql

from benchmarks.__main__ import resolve_dsn
from pgtasks import App
from pgtasks._leases import ClaimPosition, ClaimRequest, Finish
from pgtasks._retry import Outcome
from pgtasks._worker.connection import WORKER_CONNECTION_OPTIONS

SCHEMAS = {"with": "pgtasks_bench_unique", "without": "pgtasks_bench_plain"}
# Migration 0014's counting trigger names unique_key (it fires only on a conflict, which
# these inserts never have): it goes first.
DROP_0010 = """
DROP TRIGGER jobs_count_deduplicated ON {schema}.jobs;
DROP INDEX {schema}.jobs_unique_active_idx, {schema}.jobs_unique_window_idx;
ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_unique_window_check;
"""


def fresh_app(dsn: str, schema: str, drop: bool) -> App:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    app = App(dsn, schema=schema, pool_max_size=2)
    app.migrate()
    if drop:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL(DROP_0010).format(schema=sql.Identifier(schema)))
    return app


def one_round(dsn: str, app: App, jobs: int) -> dict[str, float]:
    @app.task(name="noop")
    def noop() -> None: ...

    figures: dict[str, float] = {}
    with psycopg.connect(dsn) as conn:
        started = time.perf_counter()
        with conn.transaction():
            for _ in range(jobs):
                noop.apply_async(connection=conn)
        figures["insert one by one (1 txn)"] = jobs / (time.perf_counter() - started)
    batches = max(1, jobs * 5 // 1000)
    started = time.perf_counter()
    for _ in range(batches):
        noop.delay_many([{}] * 1000)
    figures["insert bulk (x1000)"] = batches * 1000 / (time.perf_counter() - started)
    store = app.queries
    with psycopg.connect(dsn, autocommit=True, options=WORKER_CONNECTION_OPTIONS) as conn:
        worker_id = store.register_worker(conn, hostname="b", pid=0, queues=None, concurrency=50)
        finished: list[Finish] = []
        position: ClaimPosition | None = None
        done = 0
        started = time.perf_counter()
        while True:
            claim = ClaimRequest(worker_id, 50, after=position)
            jobs = store.finish_and_claim_jobs(conn, finished, claim).claimed
            done += len(finished)
            if not jobs:
                break
            position = jobs[-1].position
            finished = [Finish.of(job, Outcome.done("null")) for job in jobs]
        figures["claim+finish (batch 50)"] = done / (time.perf_counter() - started)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.unique_overhead")
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--jobs", type=int, default=2000, help="one-by-one inserts per round")
    parser.add_argument("--runs", type=int, default=7, help="rounds (median)")
    args = parser.parse_args(argv)
    dsn = resolve_dsn(args.dsn)
    results: dict[str, dict[str, list[float]]] = {side: {} for side in SCHEMAS}
    for round_number in range(args.runs):
        order = list(SCHEMAS) if round_number % 2 == 0 else list(reversed(SCHEMAS))
        for side in order:
            app = fresh_app(dsn, SCHEMAS[side], drop=side == "without")
            try:
                for figure, value in one_round(dsn, app, args.jobs).items():
                    results[side].setdefault(figure, []).append(value)
            finally:
                app.close()
    print(f"rounds: {args.runs} (median, jobs/s); plain jobs only")
    print(f"{'figure':28} {'with 0010':>10} {'without':>10} {'ratio':>7}")
    for figure, values in results["with"].items():
        with_ = statistics.median(values)
        without = statistics.median(results["without"][figure])
        print(f"{figure:28} {with_:>10,.0f} {without:>10,.0f} {with_ / without:>7.3f}")
    for schema in SCHEMAS.values():
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
