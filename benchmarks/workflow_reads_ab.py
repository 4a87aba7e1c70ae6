"""Workflow reads of two checkouts' SQL on the dashboard benchmark's population.

    python -m benchmarks.workflow_reads_ab --baseline /path/to/other/checkout [--dsn DSN]
                                           [--rounds 9] [--reads 3]

Runs named queries of this checkout and of the baseline's ``pgtasks/sql/*.sql`` on the
schema ``python -m benchmarks.dashboard`` populated (run it first; its 1,000,000 jobs,
finished ones in jobs_history), each as a prepared statement on one connection (warmed
up: generic plans, as the app's), in alternating rounds; prints the median time of each
and whether both return the same ids. The reads: the chord of 1,000's steps and state,
and the first page of ``pgtasks workflows list --status failed|cancelled`` (the
baseline's ``list_workflows`` against this checkout's ``list_ended_workflows`` when the
baseline has none).

Not a test: nothing here fails a build.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.__main__ import resolve_dsn
from benchmarks.dashboard_data import PAGES_SCHEMA
from pgtasks.sql import Query, load_queries, parse_queries


def checkout_queries(root: Path) -> dict[str, Query]:
    queries: dict[str, Query] = {}
    for path in sorted((root / "pgtasks" / "sql").glob("*.sql")):
        queries.update(parse_queries(path.read_text("utf-8")))
    return queries


def reads(chord: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, query name, parameters); a status list names this checkout's query."""
    steps = {"id": chord, "limit": 2000, "max_result": 200, "max_result_bytes": 65536}
    return [
        ("chord of 1,000: steps", "get_workflow_steps", steps),
        ("chord of 1,000: state", "get_workflow", {"id": chord}),
        ("list --status failed", "list_ended_workflows", {"status": "failed"}),
        ("list --status cancelled", "list_ended_workflows", {"status": "cancelled"}),
    ]


def statement(query: Query, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    text = query.text.replace("{schema}", f'"{PAGES_SCHEMA}"')
    if query.name == "list_workflows":  # the baseline's exact read of one state
        params = {"before": None, "id": None, "limit": 51, **params}
    elif query.name == "list_ended_workflows":
        params = {"before": None, "limit": 51, **params}
    return text, params


def timed(
    conn: psycopg.Connection[Any], text: str, params: Any, reads: int
) -> tuple[float, list[Any]]:
    started = time.perf_counter()
    rows: list[Any] = []
    for _ in range(reads):
        rows = conn.execute(text, params, prepare=True).fetchall()
    return (time.perf_counter() - started) * 1000 / reads, [row[0] for row in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.workflow_reads_ab")
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout")
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--reads", type=int, default=3, help="reads per round (mean)")
    args = parser.parse_args(argv)
    dsn = resolve_dsn(args.dsn)
    this, baseline = load_queries(), checkout_queries(args.baseline)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET jit = off")  # as the app's connections
        row = conn.execute(
            f"SELECT max(id) FROM \"{PAGES_SCHEMA}\".workflows WHERE kind = 'chord'"
            " AND shape LIKE '[1000%%'"
        ).fetchone()
        if not row or row[0] is None:
            raise SystemExit("no chord of 1,000: run python -m benchmarks.dashboard first")
        print(f"{args.rounds} alternating rounds of {args.reads} reads; medians, ms")
        print(f"{'READ':28} {'BASELINE':>9} {'THIS':>9}  SAME ROWS")
        for label, name, params in reads(int(row[0])):
            old = baseline.get(name) or baseline["list_workflows"]
            sides = {
                "baseline": statement(old, params),
                "this": statement(this[name], params),
            }
            times: dict[str, list[float]] = {"baseline": [], "this": []}
            ids: dict[str, list[Any]] = {}
            for text, values in sides.values():  # warm: past the generic plan switch
                for _ in range(6):
                    conn.execute(text, values, prepare=True).fetchall()
            for number in range(args.rounds):
                order = list(sides.items())
                for side, (text, values) in order if number % 2 == 0 else order[::-1]:
                    elapsed, ids[side] = timed(conn, text, values, args.reads)
                    times[side].append(elapsed)
            print(
                f"{label:28} {statistics.median(times['baseline']):9.1f}"
                f" {statistics.median(times['this']):9.1f}  {ids['baseline'] == ids['this']}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
