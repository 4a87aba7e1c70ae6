"""How fast a limit changed at runtime reaches the workers (``--limit-changes``).

    python -m benchmarks --limit-changes [--dsn DSN] [--runs R] [--quick]

Two ``pgtasks worker`` processes at their default settings (concurrency 10, no
``--poll-interval``) serve a task declared with ``concurrency=1``. Each round enqueues 4
jobs of 1 s; once one runs and three are held back, ``pgtasks.controls.set_limit`` raises
the limit to 4: the figure is the time from just before that call (the database's clock)
to the claim of the last of the three held jobs (their ``locked_at``): the commit, the
notification on the limits channel, the wake-up and the limited claim of whichever
worker takes them. The limit is reset to the declared 1 between rounds.

The reference, in alternating rounds on the same workers: a plain job's enqueue to its
claim (the same database clock), the wake-up every enqueue gets from its notification.
Medians of R rounds, with min and max.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = "pgtasks_bench_limit_changes"
NAME = "task:changes.held"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks --limit-changes")
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--runs", type=int, default=15, help="rounds per figure (median)")
    parser.add_argument("--quick", action="store_true", help="3 rounds (smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs = 3
    return args


def wait_for(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.005)
    raise TimeoutError(f"waited {timeout} s for {what}")


def main(argv: list[str]) -> int:
    from benchmarks import __main__ as runner

    args = parse_args(argv)
    dsn = runner.resolve_dsn(args.dsn)
    runner.print_setting(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    os.environ["PGTASKS_DSN"], os.environ["PGTASKS_SCHEMA"] = dsn, SCHEMA
    from benchmarks.limit_changes_app import app, held, plain
    from pgtasks._app import controls

    app.migrate()
    command = [sys.executable, "-m", "pgtasks", "worker", "-A", "benchmarks.limit_changes_app:app"]
    workers = [
        subprocess.Popen([*command, "--log-level", "WARNING"], cwd=ROOT, env=dict(os.environ))
        for _ in range(2)
    ]
    probe = psycopg.connect(dsn, autocommit=True)
    table = sql.Identifier(SCHEMA, "all_jobs")

    def clock() -> Any:
        return probe.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]

    def locked_at(ids: list[int]) -> list[Any]:
        query = sql.SQL("SELECT locked_at FROM {} WHERE id = ANY(%s) AND attempts > 0")
        return [row[0] for row in probe.execute(query.format(table), [ids])]

    def live_workers() -> bool:
        query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(SCHEMA, "workers"))
        return probe.execute(query).fetchone()[0] == 2  # type: ignore[index]

    changes: list[float] = []
    references: list[float] = []
    try:
        wait_for(live_workers, 60, "two workers")
        for _ in range(args.runs):
            jobs = [job.id for job in held.delay_many([{"seconds": 1.0} for _ in range(4)])]
            wait_for(lambda jobs=jobs: len(locked_at(jobs)) == 1, 30, "one job running")
            time.sleep(0.2)  # the other workers' claims came back short: they wait
            before = clock()
            controls.set_limit(app, NAME, concurrency=4, actor="benchmark")
            claims = wait_for(
                lambda jobs=jobs: (found := locked_at(jobs)) and len(found) == 4 and found,
                30,
                "4 running",
            )
            changes.append((max(claims) - before).total_seconds())
            controls.reset_limit(app, NAME, actor="benchmark")

            time.sleep(1.2)  # the held jobs end: idle workers
            before = clock()
            job = plain.delay()
            claimed = wait_for(lambda job=job: locked_at([job.id]), 30, "the plain job claimed")
            references.append((claimed[0] - before).total_seconds())
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(30)
        probe.close()
        app.close()

    def line(label: str, values: list[float]) -> str:
        return (
            f"{label:<52} median {statistics.median(values) * 1000:7.1f} ms"
            f"  (min {min(values) * 1000:.1f}, max {max(values) * 1000:.1f}; {len(values)} rounds)"
        )

    print()
    print(line("limit raised 1 -> 4: change to the held jobs' claims", changes))
    print(line("reference: a plain job's enqueue to its claim", references))
    return 0
