"""Pruning 1,000,000 finished jobs: row-by-row DELETE (a checkout before jobs_history)
against dropping a day of jobs_history, alternating rounds on one server.

    python -m benchmarks.history_prune --baseline /path/to/other/checkout [--dsn DSN]
                                       [--jobs 1000000] [--runs 3]

Each round, in a fresh process importing its own checkout: a schema migrated by that
checkout gets N done jobs that finished two days ago (one INSERT … SELECT
generate_series: into jobs for a checkout without jobs_history, into that day's partition
of jobs_history otherwise, as its finishes would have put them), 1,000 pending jobs, then
VACUUM ANALYZE. The figure is the wall time of that checkout's ``prune()`` pass with a
one-day retention, the WAL it wrote, and the dead tuples it left in ``jobs`` (read from
pg_stat_user_tables after the pass's statistics are flushed). Medians of the rounds;
which checkout goes first alternates. Not a test: nothing here fails a build.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.__main__ import ROOT, resolve_dsn

SCHEMA = "pgtasks_bench_prune"

_MEASURE = r"""
import json, sys, time
import psycopg
from psycopg import sql
from pgtasks import App
from pgtasks._worker.pruner import prune

dsn, schema, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3])
ident = sql.Identifier(schema)
with psycopg.connect(dsn, autocommit=True) as conn:
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(ident))
app = App(dsn=dsn, schema=schema)
app.migrate()
columns = ("(task_name, queue, args, kwargs, status, attempts, max_attempts, created_at,"
           " updated_at, finished_at)")
finished = ("SELECT 'bench.noop', 'default', '[]'::jsonb, '{{}}'::jsonb, 'done', 1, 1, at, at, at"
            " FROM generate_series(1, %(jobs)s::int) AS i,"
            " LATERAL (SELECT date_trunc('day', now() - interval '2 days')"
            " + (i %% 86000) * interval '1 second' AS at) AS t")
with psycopg.connect(dsn, autocommit=True) as conn:
    history = conn.execute("SELECT to_regclass(%s)", [f'"{schema}".jobs_history']).fetchone()[0]
    if history is not None:
        conn.execute(sql.SQL(
            "SELECT * FROM {}.jobs_history_create_days(now() - interval '2 days', 0)"
        ).format(ident))
        conn.execute(sql.SQL(
            "INSERT INTO {}.jobs_history (id, task_name, queue, args, kwargs, status,"
            " attempts, max_attempts, created_at, updated_at, finished_at)"
            " SELECT -row_number() OVER (), * FROM (" + finished + ") AS f"
        ).format(ident), {"jobs": jobs})
    else:
        conn.execute(sql.SQL("INSERT INTO {}.jobs " + columns + " " + finished).format(ident),
                     {"jobs": jobs})
    conn.execute(sql.SQL(
        "INSERT INTO {}.jobs (task_name, queue, args, kwargs, max_attempts)"
        " SELECT 'bench.noop', 'default', '[]', '{{}}', 1 FROM generate_series(1, 1000)"
    ).format(ident))
    conn.execute(sql.SQL("VACUUM ANALYZE {}.jobs").format(ident))
    if history is not None:
        conn.execute(sql.SQL("VACUUM ANALYZE {}.jobs_history").format(ident))
    before = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    started = time.perf_counter()
    result = prune(app.queries, conn, done_after=86400.0, failed_after=None)
    elapsed = time.perf_counter() - started
    wal = conn.execute("SELECT pg_current_wal_lsn() - %s::pg_lsn", [before]).fetchone()[0]
    conn.execute("SELECT pg_stat_force_next_flush()")
with psycopg.connect(dsn, autocommit=True) as conn:
    conn.execute("SELECT pg_stat_force_next_flush()")
    dead = conn.execute(
        "SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = %s AND relname = 'jobs'",
        [schema],
    ).fetchone()[0]
    conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(ident))
app.close()
print(json.dumps({"seconds": elapsed, "pruned": result.total, "wal_bytes": float(wal),
                  "dead_tuples": int(dead)}))
"""


def move_into_history(conn: psycopg.Connection[Any], schema_name: str) -> None:
    """Where finishes put finished jobs (migration jobs_history): the finished rows move
    from jobs into the day partitions of jobs_history (created for the 31 days they span),
    as the pruner moves rows an older version left in jobs. A checkout without
    jobs_history keeps them in jobs."""
    schema = sql.Identifier(schema_name)
    history = conn.execute(
        "SELECT to_regclass(%s)", [sql.SQL("{}.jobs_history").format(schema).as_string(conn)]
    ).fetchone()
    if not history or history[0] is None:
        return
    create = sql.SQL("SELECT * FROM {}.jobs_history_create_days(now() - interval '31 days', 33)")
    while conn.execute(create.format(schema)).fetchall():
        pass
    with conn.transaction():
        conn.execute("SELECT set_config('pgtasks.archiving', 'on', true)")
        conn.execute(
            sql.SQL(
                "WITH moved AS (DELETE FROM {}.jobs WHERE status IN ('done', 'failed',"
                " 'cancelled') RETURNING *) INSERT INTO {}.jobs_history SELECT * FROM moved"
            ).format(schema, schema)
        )
    conn.execute(sql.SQL("VACUUM (ANALYZE) {}.jobs_history").format(schema))


def measure(checkout: Path, dsn: str, jobs: int) -> dict[str, float]:
    completed = subprocess.run(
        [sys.executable, "-c", _MEASURE, dsn, SCHEMA, str(jobs)],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{checkout}: {completed.stderr[-2000:]}")
    result: dict[str, float] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.history_prune", description=__doc__)
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout")
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--jobs", type=int, default=1_000_000, help="finished jobs to prune")
    parser.add_argument("--runs", type=int, default=3, help="rounds (median)")
    args = parser.parse_args(argv)
    dsn = resolve_dsn(args.dsn)
    sides = {"this": ROOT, "baseline": args.baseline.resolve()}
    results: dict[str, list[dict[str, float]]] = {"this": [], "baseline": []}
    for round_number in range(args.runs):
        order = ["this", "baseline"] if round_number % 2 == 0 else ["baseline", "this"]
        for side in order:
            figure = measure(sides[side], dsn, args.jobs)
            results[side].append(figure)
            print(f"round {round_number + 1} {side:8} {json.dumps(figure)}", flush=True)
    print(f"\npruning {args.jobs:,} finished jobs, median of {args.runs} rounds (min-max):")
    for side in ("baseline", "this"):
        rows = results[side]
        seconds = [row["seconds"] for row in rows]
        print(
            f"  {side:8} {statistics.median(seconds):8.3f} s"
            f" ({min(seconds):.3f}-{max(seconds):.3f})"
            f"  pruned {statistics.median(row['pruned'] for row in rows):,.0f}"
            f"  WAL {statistics.median(row['wal_bytes'] for row in rows) / 2**20:,.1f} MiB"
            f"  dead tuples left in jobs"
            f" {statistics.median(row['dead_tuples'] for row in rows):,.0f}"
        )
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
