"""What workflows cost plain jobs, and what a workflow step costs.

    python -m benchmarks.workflows [--dsn DSN] [--jobs N] [--runs R] [--quick]

Plain jobs never fire the workflow row trigger (its WHEN clause is false), but the
triggers are on the table: the UPDATE of every claim and finish evaluates that clause,
and calls the statement trigger of migration workflow_progress once (which returns at
once: no workflow job ended). This script measures the claim+finish statements on N plain
jobs with the triggers enabled and with them disabled (ALTER TABLE ... DISABLE TRIGGER),
alternating rounds in one schema, so the two figures share the machine's load; then the
same loop over chord members (each finish decrements its callback's counter; the last
starts it) and chain steps, with the current triggers and with migration 0011's trigger
(a second schema: the reference). Figures are the median of R rounds, in jobs per second
of the raw statements (no worker process).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.workflow_races import install_0011_trigger
from pgtasks import App, chain, chord
from pgtasks._leases import ClaimRequest, Finish
from pgtasks._retry import Outcome

SCHEMA = "pgtasks_bench_workflows"
BATCH = 50


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.workflows", description=__doc__)
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per round")
    parser.add_argument("--runs", type=int, default=5, help="rounds per figure (median)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.runs = 400, 1
    return args


def drain(app: App, conn: psycopg.Connection[Any]) -> tuple[int, float]:
    """Claim and finish every due job, BATCH at a time: (jobs, seconds)."""
    store, count = app.queries, 0
    started = time.perf_counter()
    while True:
        jobs = store.claim_jobs(conn, ClaimRequest(1, BATCH))
        if not jobs:
            return count, time.perf_counter() - started
        written = store.finish_jobs(conn, [Finish.of(job, Outcome.done("1")) for job in jobs])
        assert len(written) == len(jobs), "a finish was not written"
        count += len(jobs)


def set_trigger(app: App, conn: psycopg.Connection[Any], enabled: bool) -> None:
    for trigger in ("jobs_workflow_job_ended", "jobs_workflow_jobs_ended"):
        conn.execute(
            sql.SQL("ALTER TABLE {}.jobs {} TRIGGER {}").format(
                sql.Identifier(app.schema),
                sql.SQL("ENABLE" if enabled else "DISABLE"),
                sql.Identifier(trigger),
            )
        )


def new_app(dsn: str | None, schema: str) -> App:
    app = App(dsn, schema=schema)
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    app.migrate()

    @app.task(name="bench.step")
    def step(*values: Any) -> int:
        return 1

    return app


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Three schemas, so that each drain reads a table of the same history: plain jobs
    # (triggers on and off), workflows with the current triggers, with 0011's.
    plain = new_app(args.dsn, SCHEMA)
    app = new_app(args.dsn, SCHEMA + "_current")
    reference = new_app(args.dsn, SCHEMA + "_0011")
    with psycopg.connect(reference.dsn, autocommit=True) as conn:
        install_0011_trigger(reference, conn)
    figures: dict[str, list[float]] = {
        "plain jobs, triggers enabled": [],
        "plain jobs, triggers disabled": [],
        "chord members (8 per chord) and callbacks": [],
        "chord members, migration 0011's trigger": [],
        "chain steps (10 per chain)": [],
        "chain steps, migration 0011's trigger": [],
    }

    def vacuum(target: App, conn: psycopg.Connection[Any]) -> None:
        conn.execute(sql.SQL("VACUUM ANALYZE {}.jobs").format(sql.Identifier(target.schema)))

    def workflows(target: App, conn: psycopg.Connection[Any], chords: str, chains: str) -> None:
        step = target.get_task("bench.step")
        for _ in range(args.jobs // 9):
            chord([step.s(n) for n in range(8)], step.s()).delay()
        vacuum(target, conn)
        count, seconds = drain(target, conn)
        figures[chords].append(count / seconds)
        for _ in range(args.jobs // 10):
            chain(*[step.s() if n else step.s(0) for n in range(10)]).delay()
        vacuum(target, conn)
        count, seconds = drain(target, conn)
        figures[chains].append(count / seconds)

    with psycopg.connect(app.dsn, autocommit=True) as conn:
        for round_number in range(args.runs):
            # Alternate which goes first: a trend in the machine's load hits both alike.
            first = round_number % 2 == 0
            for enabled in (True, False) if first else (False, True):
                plain.get_task("bench.step").delay_many([((), {})] * args.jobs)
                vacuum(plain, conn)
                set_trigger(plain, conn, enabled)
                count, seconds = drain(plain, conn)
                set_trigger(plain, conn, True)
                name = f"plain jobs, triggers {'enabled' if enabled else 'disabled'}"
                figures[name].append(count / seconds)
            for current in (True, False) if first else (False, True):
                if current:
                    names = (
                        "chord members (8 per chord) and callbacks",
                        "chain steps (10 per chain)",
                    )
                    workflows(app, conn, *names)
                else:
                    names = (
                        "chord members, migration 0011's trigger",
                        "chain steps, migration 0011's trigger",
                    )
                    workflows(reference, conn, *names)
    for each in (plain, app, reference):
        each.close()
    print(f"claim+finish statements, batches of {BATCH}, {args.jobs} jobs, {args.runs} round(s)")
    width = max(len(name) for name in figures)
    for name, values in figures.items():
        print(
            f"  {name.ljust(width)}  {statistics.median(values):9.0f} jobs/s"
            f"  (min {min(values):.0f}, max {max(values):.0f})"
        )
    enabled = statistics.median(figures["plain jobs, triggers enabled"])
    disabled = statistics.median(figures["plain jobs, triggers disabled"])
    print(f"  plain jobs with the triggers / without: {enabled / disabled:.3f}")
    for kind, name in (
        ("chord members", "chord members (8 per chord) and callbacks"),
        ("chain steps", "chain steps (10 per chain)"),
    ):
        current = statistics.median(figures[name])
        old = statistics.median(figures[f"{kind}, migration 0011's trigger"])
        print(f"  {kind}, current triggers / migration 0011's: {current / old:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
