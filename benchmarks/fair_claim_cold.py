"""The limited claim on fair jobs right after a bulk enqueue, before the table is analyzed.

    python -m benchmarks.fair_claim_cold [--dsn DSN] [--jobs 20000] [--claims 15] [--runs 3]

Each run makes a fresh schema, turns autovacuum off on its jobs table (so no analyze runs
while it measures), enqueues N fair jobs over 1,000 keys in batches and times claims of
10 (one worker's claim at c10), alternating between the function as shipped (migration
0028: enable_sort and jit off; 0033: plan_cache_mode force_generic_plan too) and a copy
of it without those settings (the plans the planner chooses from the statistics it has:
none yet), on one connection (plans cached as a worker's are). Either side takes the next
10 jobs in claim order. Prints the median claim in ms of each side per run and the median
over runs.

Not a test: nothing here fails a build.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time

import psycopg
from psycopg import sql

from benchmarks.__main__ import print_setting, resolve_dsn
from pgtasks import App

SCHEMA = "pgtasks_bench_fair_claim_cold"
SIGNATURE = (
    "(bigint, text[], text[], text[], integer, double precision, text[], double precision[])"
)


def one_run(dsn: str, jobs: int, claims: int) -> tuple[float, float]:
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    app = App(dsn, schema=SCHEMA)
    try:
        app.migrate()

        @app.task(name="bench_fair", fair_key=lambda tenant, **_: tenant)
        def fair(tenant: str, n: int) -> None: ...

        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("ALTER TABLE {}.jobs SET (autovacuum_enabled = false)").format(
                    sql.Identifier(SCHEMA)
                )
            )
            for start in range(0, jobs, 5000):
                stop = min(jobs, start + 5000)
                fair.delay_many([{"tenant": f"t{n % 1000}", "n": n} for n in range(start, stop)])
            with app.connection() as conn:
                worker = app.queries.register_worker(
                    conn, hostname="bench", pid=1, queues=None, concurrency=10
                )
            # The planner's side: a copy of the function without its SET clauses.
            definition = admin.execute(
                "SELECT pg_get_functiondef(%s::regprocedure)",
                [f"{SCHEMA}.claim_limited{SIGNATURE}"],
            ).fetchone()
            assert definition is not None
            copy = re.sub(r"\n *SET \w+ TO [^\n]*", "", definition[0])
            copy = copy.replace(".claim_limited(", ".claim_limited_unset(", 1)
            if copy == definition[0] or " SET " in copy.split("AS $function$")[0]:
                raise SystemExit("the function's settings were not found")
            admin.execute(copy)
            times: dict[str, list[float]] = {"claim_limited": [], "claim_limited_unset": []}
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("SET default_transaction_isolation = 'read committed'")
                for index in range(2 * claims):
                    name = "claim_limited" if index % 2 == 0 else "claim_limited_unset"
                    query = sql.SQL("SELECT count(id) FROM {}.{}(%s, NULL, NULL, NULL, 10)").format(
                        sql.Identifier(SCHEMA), sql.Identifier(name)
                    )
                    started = time.perf_counter()
                    row = conn.execute(query, [worker]).fetchone()
                    times[name].append((time.perf_counter() - started) * 1000)
                    if row != (10,):
                        raise SystemExit(f"a claim took {row} jobs, not 10")
            analyzed = admin.execute(
                "SELECT coalesce(last_analyze, last_autoanalyze) IS NULL FROM pg_stat_user_tables"
                " WHERE schemaname = %s AND relname = 'jobs'",
                [SCHEMA],
            ).fetchone()
            if analyzed != (True,):
                raise SystemExit("the jobs table was analyzed during the run")
        return (
            statistics.median(times["claim_limited"]),
            statistics.median(times["claim_limited_unset"]),
        )
    finally:
        app.close()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA))
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--jobs", type=int, default=20000, help="fair jobs enqueued")
    parser.add_argument("--claims", type=int, default=15, help="claims timed per side")
    parser.add_argument("--runs", type=int, default=3, help="runs (median)")
    args = parser.parse_args(argv)
    dsn = resolve_dsn(args.dsn)
    print_setting(dsn)
    shipped: list[float] = []
    reset: list[float] = []
    for run in range(args.runs):
        ours, planners = one_run(dsn, args.jobs, args.claims)
        shipped.append(ours)
        reset.append(planners)
        print(
            f"run {run + 1}: claim of 10 on {args.jobs} un-analyzed fair jobs:"
            f" {ours:.1f} ms as shipped, {planners:.1f} ms without its settings"
        )
    print(
        f"median: {statistics.median(shipped):.1f} ms as shipped,"
        f" {statistics.median(reset):.1f} ms without its settings"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
