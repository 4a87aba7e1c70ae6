"""Chord races with real workers: how many callbacks are left stuck or start twice.

    python -m benchmarks --workflow-races [--dsn DSN] [--chords N] [--rounds R]
        [--workers W] [--concurrency C] [--no-reference] [--quick] [--json PATH]

Enqueues N nested chords, chord([a1, chord([b1, b2], cy), a3], cx), and lets W
`pgtasks worker` processes of concurrency C run them: with a small concurrency the
members of one chord are claimed by different workers, so they finish at the same
instants and their writes race for the callbacks (b1 and b2 for cy; a1, cy and a3 for
cx), in the orders that once deadlocked. Then it counts, for the 2N callbacks:

- stuck: still waiting once nothing is pending or running (a start lost);
- doubled: started more than once (two executions recorded by the callback);
- wrong: started with another input than its predecessors' results in order;
- healed: started by the healing pass instead of the trigger (it should have nothing to do).

The reference rounds run the same chords in the same run with migration 0011's trigger
(each finished member moved its own successors on, row by row, and an error there was
only a server log warning), with the healing pass off: what it loses shows. Rounds
alternate (current first, then reference first, ...); counts are summed over the rounds,
jobs/s is the median (first claim to last finish, as the database's clock says).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pgtasks import App, chord
from pgtasks.sql import load_migrations

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = "pgtasks_bench_races"
APP_PATH = "benchmarks.workflow_races_app:app"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks --workflow-races", description=__doc__
    )
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--chords", type=int, default=1000, help="nested chords per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per trigger")
    parser.add_argument("--workers", type=int, default=4, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=2, help="concurrency of each")
    parser.add_argument(
        "--reference",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run migration 0011's trigger (default: yes)",
    )
    parser.add_argument("--quick", action="store_true", help="50 chords (a smoke test)")
    parser.add_argument(
        "--json", default=str(ROOT / "benchmarks" / "results" / "workflow_races.json")
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.chords, args.rounds = 50, 1
    return args


def resolve_dsn(explicit: str | None) -> str:
    if explicit:
        return explicit
    from pgtasks._embedded import embedded_dsn

    return embedded_dsn(ROOT / ".pgtasks-bench")


def prepare(dsn: str, schema: str, *, reference: bool) -> App:
    """A fresh schema with the callback_runs table; with ``reference``, migration 0011's
    trigger in place of the current ones."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    app = App(dsn, schema=schema)
    app.migrate()
    identifier = sql.Identifier(schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {}.callback_runs (id bigserial PRIMARY KEY, job_id bigint NOT NULL,"
                " attempt int NOT NULL)"
            ).format(identifier)
        )
        if reference:
            install_0011_trigger(app, conn)
    return app


def install_0011_trigger(app: App, conn: psycopg.Connection[Any]) -> None:
    """Put migration 0011's workflow trigger back in ``app``'s schema (a reference): its
    row function in place of the current one, and no statement trigger."""
    text = next(migration.text for migration in load_migrations() if migration.name == "workflows")
    function = text[
        text.index("CREATE FUNCTION {schema}.workflow_job_ended") : text.index(
            "CREATE TRIGGER jobs_workflow_job_ended"
        )
    ].replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
    conn.execute(app.queries._render(function))
    conn.execute(
        sql.SQL("DROP TRIGGER jobs_workflow_jobs_ended ON {}.jobs").format(
            sql.Identifier(app.schema)
        )
    )


def enqueue(app: App, count: int) -> list[dict[str, int]]:
    """``count`` nested chords; each one's job ids by role (a1 b1 b2 cy a3 cx)."""
    member = app.task(name="race.member")(lambda value: value)
    callback = app.task(name="race.callback")(lambda values: values)
    roles = {"0.0": "a1", "0.1.0.0": "b1", "0.1.0.1": "b2", "0.1.1": "cy", "0.2": "a3", "1": "cx"}
    chords = []
    with app.connection() as conn, conn.transaction():
        for n in range(count):
            workflow = chord(
                [
                    member.s(4 * n + 1),
                    chord([member.s(4 * n + 2), member.s(4 * n + 3)], callback.s()),
                    member.s(4 * n + 4),
                ],
                callback.s(),
            ).apply_async(connection=conn)
            chords.append(workflow.id)
    jobs = app.database.run(
        lambda conn: conn.execute(
            sql.SQL(
                "SELECT workflow_id, workflow_step, id FROM {}.all_jobs"
                " WHERE workflow_id IS NOT NULL"
            ).format(sql.Identifier(app.schema))
        ).fetchall()
    )
    by_workflow: dict[int, dict[str, int]] = {workflow_id: {} for workflow_id in chords}
    for workflow_id, step, job_id in jobs:
        by_workflow[workflow_id][roles[step]] = job_id
    return [by_workflow[workflow_id] for workflow_id in chords]


def run_workers(
    dsn: str, schema: str, workers: int, concurrency: int, heal_interval: float, timeout: float
) -> float:
    """Start the workers, wait until nothing is pending or running (for a second), stop
    them; seconds from the first claim to the last finish."""
    env = {
        **os.environ,
        "PGTASKS_DSN": dsn,
        "PGTASKS_SCHEMA": schema,
        "PGTASKS_BENCH_HEAL_INTERVAL": str(heal_interval),
    }
    command = [sys.executable, "-m", "pgtasks", "worker", "-A", APP_PATH, "--log-level", "ERROR"]
    processes = [
        subprocess.Popen([*command, f"--concurrency={concurrency}"], cwd=ROOT, env=env)
        for _ in range(workers)
    ]
    identifier = sql.Identifier(schema)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            deadline = time.monotonic() + timeout
            quiet_since: float | None = None
            while time.monotonic() < deadline:
                active = conn.execute(
                    sql.SQL(
                        "SELECT count(*) FROM {}.jobs WHERE status IN ('pending', 'running')"
                    ).format(identifier)
                ).fetchone()
                assert active is not None
                if active[0] == 0:
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since >= 1.0:
                        break
                else:
                    quiet_since = None
                time.sleep(0.1)
            span = conn.execute(
                sql.SQL(
                    "SELECT extract(epoch FROM max(finished_at) - min(started_at)) FROM {}.all_jobs"
                ).format(identifier)
            ).fetchone()
            assert span is not None
            return float(span[0] or 0.0)
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def count(dsn: str, schema: str, roles: list[dict[str, int]]) -> dict[str, int]:
    identifier = sql.Identifier(schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL("SELECT id, status, args, result FROM {}.all_jobs").format(identifier)
        ).fetchall()
        runs = dict(
            conn.execute(
                sql.SQL("SELECT job_id, count(*) FROM {}.callback_runs GROUP BY job_id").format(
                    identifier
                )
            ).fetchall()
        )
        healed = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.workflow_incidents WHERE kind = 'healed'").format(
                identifier
            )
        ).fetchone()
    jobs = {job_id: (status, args, result) for job_id, status, args, result in rows}
    stuck = doubled = wrong = 0
    for n, ids in enumerate(roles):
        expected = {
            "cy": [[4 * n + 2, 4 * n + 3]],
            "cx": [[4 * n + 1, [4 * n + 2, 4 * n + 3], 4 * n + 4]],
        }
        for role in ("cy", "cx"):
            status, args, _ = jobs[ids[role]]
            executions = runs.get(ids[role], 0)
            if status == "waiting":
                stuck += 1
            elif status != "done" or args != expected[role]:
                wrong += 1
            if executions > 1:
                doubled += 1
    return {
        "callbacks": 2 * len(roles),
        "stuck": stuck,
        "doubled": doubled,
        "wrong": wrong,
        "healed": int(healed[0]) if healed else 0,
    }


def one_round(args: argparse.Namespace, dsn: str, *, reference: bool) -> dict[str, Any]:
    schema = SCHEMA + ("_reference" if reference else "")
    app = prepare(dsn, schema, reference=reference)
    try:
        roles = enqueue(app, args.chords)
    finally:
        app.close()
    seconds = run_workers(
        dsn,
        schema,
        args.workers,
        args.concurrency,
        heal_interval=3600.0 if reference else 30.0,
        timeout=60 + args.chords * 0.2,
    )
    counts = count(dsn, schema, roles)
    jobs = 6 * args.chords
    return {
        "trigger": "0011 (reference)" if reference else "current",
        "chords": args.chords,
        "jobs": jobs,
        "seconds": round(seconds, 3),
        "jobs_per_second": round(jobs / seconds, 1) if seconds else 0.0,
        **counts,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dsn = resolve_dsn(args.dsn)
    print(
        f"{args.chords} nested chords chord([a1, chord([b1, b2], cy), a3], cx) per round,"
        f" {args.rounds} round(s) per trigger, {args.workers} workers of concurrency"
        f" {args.concurrency}; {os.cpu_count()} cores"
    )
    header = f"{'trigger':18} {'callbacks':>9} {'stuck':>6} {'doubled':>7} {'wrong':>6}"
    print(header + f" {'healed':>6} {'jobs/s':>8}")
    rounds: list[dict[str, Any]] = []
    for number in range(args.rounds):
        order = [False, True] if number % 2 == 0 else [True, False]
        for reference in order if args.reference else [False]:
            result = one_round(args, dsn, reference=reference)
            rounds.append(result)
            print(row(result), flush=True)
    results = []
    for trigger in dict.fromkeys(result["trigger"] for result in rounds):
        mine = [result for result in rounds if result["trigger"] == trigger]
        total: dict[str, Any] = {"trigger": trigger, "rounds": len(mine)}
        for key in ("chords", "jobs", "callbacks", "stuck", "doubled", "wrong", "healed"):
            total[key] = sum(result[key] for result in mine)
        total["jobs_per_second"] = statistics.median(result["jobs_per_second"] for result in mine)
        results.append(total)
    print("all rounds (counts summed, jobs/s median):")
    for total in results:
        print(row(total))
    output = Path(args.json)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"results": results, "rounds": rounds}, indent=2))
    current = results[0]
    return 0 if (current["stuck"], current["doubled"], current["wrong"]) == (0, 0, 0) else 1


def row(result: dict[str, Any]) -> str:
    return (
        f"{result['trigger']:18} {result['callbacks']:>9} {result['stuck']:>6}"
        f" {result['doubled']:>7} {result['wrong']:>6} {result['healed']:>6}"
        f" {result['jobs_per_second']:>8,.0f}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
