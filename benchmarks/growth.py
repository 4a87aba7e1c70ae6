"""Cost as the table grows: enqueue, claim and finish beside an empty schema (issue: limits).

    python -m benchmarks.growth [--dsn DSN] [--future 1000000,10000000] [--history 10000000]
                                [--jobs 2000] [--runs 3] [--batch 10] [--quick] [--refill]

Each state is a schema of its own on the same server, measured against an empty schema
(``pgtasks_growth_empty``) in the same run, rounds alternating which goes first:

- ``future N``: N pending jobs due far ahead (``run_at`` a year and more away) in jobs;
- ``history N``: N finished jobs in jobs_history (done, finished over the last days).

Rows are filled with one ``INSERT … SELECT generate_series`` per million (triggers off
when the role may: they are plain jobs), then ``VACUUM ANALYZE``. Each state's schema
(``pgtasks_growth_<kind>_<size>``) is kept and used again by the next run (``--refill``
fills it anew), so the 10M fills are paid once; drop the schemas to free their space.

Each round, in each schema: ``--jobs`` jobs enqueued one by one (``delay()``, autocommit),
claimed by the worker's own claim statements ``--batch`` at a time in a bare loop (from
its last position, from the start once a second, as the worker's ClaimCursor), finished
``--batch`` at a time (the worker's finish: each leaves jobs for jobs_history), and an
idle claim (nothing due: what every idle worker runs each poll) timed 20 times. Figures:
jobs/s of each step (ms for the idle claim), medians of the rounds, and each state's
ratio to the empty schema's (median over median; the per-round range beside it).

The EXPLAIN (ANALYZE, BUFFERS) plans of claim_jobs, claim_jobs_after, the idle claim and
finish_jobs in every state are written to ``--plans`` (each run in a transaction rolled
back); a line per plan with its execution time and buffers is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pgtasks import App
from pgtasks._leases import ClaimedJob, ClaimPosition, ClaimRequest, Finish
from pgtasks._retry import Outcome
from pgtasks._store.claims import claim_statement, finish_params
from pgtasks._worker.connection import WORKER_CONNECTION_OPTIONS

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "pgtasks_growth_"
FILL_CHUNK = 1_000_000
TASK = "growth.noop"
IDLE_CLAIMS = 20


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.growth", description=__doc__)
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--future", default="1000000,10000000", help="future-pending sizes")
    parser.add_argument("--history", default="10000000", help="history sizes ('' for none)")
    parser.add_argument("--jobs", type=int, default=2000, help="jobs per step and round")
    parser.add_argument("--runs", type=int, default=3, help="rounds per state (median)")
    parser.add_argument("--batch", type=int, default=10, help="claim and finish batch")
    parser.add_argument("--refill", action="store_true", help="fill kept schemas anew")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round")
    parser.add_argument(
        "--plans", default=str(ROOT / "benchmarks" / "results" / "growth-plans.txt")
    )
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "growth.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.future, args.history, args.jobs, args.runs = "20000", "20000", 200, 1
    return args


def sizes(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


# -- schemas -------------------------------------------------------------------------------------
def make_app(dsn: str, schema: str) -> App:
    app = App(dsn=dsn, schema=schema, pool_max_size=2)

    @app.task(name=TASK)
    def noop() -> None:
        """Does nothing."""

    app.migrate()
    return app


def filled(conn: psycopg.Connection[Any], schema: str) -> str | None:
    """What the schema says it holds (its comment), None when it does not exist."""
    row = conn.execute(
        "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = %s",
        (schema,),
    ).fetchone()
    return None if row is None else str(row[0] or "")


def drop(conn: psycopg.Connection[Any], schema: str) -> None:
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@contextmanager
def triggers_off(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """Triggers off for the fill (plain rows: they would do nothing), when the role may."""
    try:
        conn.execute("SET session_replication_role = replica")
        off = True
    except psycopg.errors.InsufficientPrivilege:
        off = False
    try:
        yield
    finally:
        if off:
            conn.execute("SET session_replication_role = DEFAULT")


def fill_future(conn: psycopg.Connection[Any], schema: str, start: int, stop: int) -> None:
    """Pending jobs ``start`` .. ``stop`` (counted from 0), due a year and more away."""
    statement = sql.SQL(
        "INSERT INTO {}.jobs (task_name, queue, priority, args, kwargs, max_attempts, run_at,"
        " meta) SELECT %s, 'default', 0, '[]', '{{}}', 3,"
        " now() + interval '365 days' + g * interval '1 second', '{{}}'"
        " FROM generate_series(%s::bigint, %s::bigint) AS g"
    ).format(sql.Identifier(schema))
    with triggers_off(conn):
        for low in range(start, stop, FILL_CHUNK):
            high = min(stop, low + FILL_CHUNK) - 1
            began = time.perf_counter()
            conn.execute(statement, (TASK, low, high))
            print(f"  {schema}: future rows to {high + 1:,} ({time.perf_counter() - began:.0f} s)")


def fill_history(conn: psycopg.Connection[Any], schema: str, count: int) -> None:
    """``count`` done jobs in jobs_history, finished over the last days, with ids taken
    from the jobs' sequence (moved past them)."""
    ident = sql.Identifier(schema)
    sequence = conn.execute(
        "SELECT pg_get_serial_sequence(%s, 'id')", (f'"{schema}".jobs',)
    ).fetchone()[0]  # type: ignore[index]
    base = int(conn.execute("SELECT nextval(%s::regclass)", (sequence,)).fetchone()[0])  # type: ignore[index]
    conn.execute("SELECT setval(%s::regclass, %s)", (sequence, base + count + 1))
    statement = sql.SQL(
        "INSERT INTO {}.jobs_history (id, task_name, queue, priority, args, kwargs, status,"
        " attempts, max_attempts, run_at, locked_at, locked_by, result, created_at,"
        " updated_at, finished_at, cancel_requested, meta, started_at)"
        " SELECT %s::bigint + g, %s, 'default', 0, '[]', '{{}}', 'done', 1, 3, t, t, 1, 'null',"
        " t, t, t, false, '{{}}', t"
        " FROM generate_series(%s::bigint, %s::bigint) AS g,"
        " LATERAL (SELECT now() - g * interval '20 ms') AS f(t)"
    ).format(ident)
    with triggers_off(conn):
        for low in range(1, count + 1, FILL_CHUNK):
            high = min(count, low + FILL_CHUNK - 1)
            began = time.perf_counter()
            conn.execute(statement, (base, TASK, low, high))
            print(f"  {schema}: history rows to {high:,} ({time.perf_counter() - began:.0f} s)")


def vacuum(conn: psycopg.Connection[Any], schema: str) -> None:
    began = time.perf_counter()
    for table in ("jobs", "jobs_history", "job_keys"):
        conn.execute(
            sql.SQL("VACUUM ANALYZE {}.{}").format(sql.Identifier(schema), sql.Identifier(table))
        )
    print(f"  {schema}: VACUUM ANALYZE ({time.perf_counter() - began:.0f} s)")


def prepare(dsn: str, kind: str, size: int, refill: bool) -> str:
    """The schema of a state (one per kind and size), filled to ``size``; kept from an
    earlier run when it holds that already."""
    schema = f"{PREFIX}{kind}_{size}"
    label = f"{kind} {size}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        if not refill and filled(conn, schema) == label:
            print(f"{schema}: kept ({label})")
            make_app(dsn, schema).close()  # migrated to this checkout's schema
            return schema
        drop(conn, schema)
        print(f"{schema}: filling {label}")
        make_app(dsn, schema).close()
        if kind == "future":
            fill_future(conn, schema, 0, size)
        elif kind == "history":
            fill_history(conn, schema, size)
        vacuum(conn, schema)
        conn.execute(
            sql.SQL("COMMENT ON SCHEMA {} IS {}").format(sql.Identifier(schema), sql.Literal(label))
        )
    return schema


# -- one round in one schema -------------------------------------------------------------------
def worker_connection(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True, options=WORKER_CONNECTION_OPTIONS)


def measure(app: App, dsn: str, jobs: int, batch: int) -> dict[str, float]:
    """enqueue, claim, finish (jobs/s) and idle claim (ms) of one round."""
    noop = app.tasks[TASK]
    started = time.perf_counter()
    for _ in range(jobs):
        noop.delay()
    enqueue = jobs / (time.perf_counter() - started)
    store = app.queries
    with worker_connection(dsn) as conn:
        worker_id = store.register_worker(
            conn, hostname="growth", pid=0, queues=None, concurrency=batch
        )
        claimed: list[ClaimedJob] = []
        position: ClaimPosition | None = None
        next_full = 0.0
        started = time.perf_counter()
        while len(claimed) < jobs:
            if time.monotonic() >= next_full:
                position, next_full = None, time.monotonic() + 1.0
            got = store.finish_and_claim_jobs(
                conn, (), ClaimRequest(worker_id, batch, after=position)
            ).claimed
            if not got:
                raise RuntimeError(f"claimed {len(claimed)} of {jobs} jobs")
            claimed.extend(got)
            position = got[-1].position
        claim = len(claimed) / (time.perf_counter() - started)
        done = Outcome.done("null")
        finishes = [Finish.of(job, done) for job in claimed]
        started = time.perf_counter()
        written = 0
        for low in range(0, len(finishes), batch):
            written += len(
                store.finish_and_claim_jobs(conn, finishes[low : low + batch], None).written
            )
        finish = written / (time.perf_counter() - started)
        if written != jobs:
            raise RuntimeError(f"finished {written} of {jobs} jobs")
        idle = []
        for _ in range(IDLE_CLAIMS):
            began = time.perf_counter()
            got = store.finish_and_claim_jobs(conn, (), ClaimRequest(worker_id, batch)).claimed
            idle.append((time.perf_counter() - began) * 1000)
            if got:
                raise RuntimeError("the idle claim found a job")
        store.deregister_worker(conn, worker_id)
    return {
        "enqueue": enqueue,
        "claim": claim,
        "finish": finish,
        "idle claim": statistics.median(idle),
    }


# -- plans --------------------------------------------------------------------------------
def explain(
    conn: psycopg.Connection[Any], statement: bytes, params: dict[str, Any], binary: bool = False
) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of ``statement``, in a transaction rolled back."""
    with conn.transaction(force_rollback=True), conn.cursor() as cursor:
        cursor.execute(b"EXPLAIN (ANALYZE, BUFFERS)\n" + statement, params, binary=binary)
        return "\n".join(str(row[0]) for row in cursor.fetchall())


def plans(app: App, dsn: str, batch: int) -> dict[str, str]:
    """The plans of the claim and finish statements in this schema's state."""
    noop = app.tasks[TASK]
    store = app.queries
    found: dict[str, str] = {}
    with psycopg.connect(dsn, options=WORKER_CONNECTION_OPTIONS) as conn:
        conn.autocommit = True
        worker_id = store.register_worker(
            conn, hostname="growth-plans", pid=0, queues=None, concurrency=batch
        )
        statements = store._statements  # the worker's own texts
        request = ClaimRequest(worker_id, batch)
        name, params = claim_statement(request)
        found["claim_jobs, nothing due (an idle worker's claim)"] = explain(
            conn, statements[name], params
        )
        for _ in range(batch * 3):
            noop.delay()
        found[f"claim_jobs, {batch * 3} due"] = explain(conn, statements[name], params)
        got = store.finish_and_claim_jobs(conn, (), request).claimed
        after = ClaimRequest(worker_id, batch, after=got[-1].position)
        name, params = claim_statement(after)
        found[f"claim_jobs_after, {batch * 2} due"] = explain(conn, statements[name], params)
        done = Outcome.done("null")
        (params,) = finish_params([Finish.of(job, done) for job in got])
        found[f"finish_jobs, {len(got)} jobs"] = explain(
            conn,
            store._binary_statements["finish_jobs"],
            params,
            binary=True,
        )
        rest = store.finish_and_claim_jobs(
            conn, [Finish.of(job, done) for job in got], ClaimRequest(worker_id, batch * 3)
        )
        store.finish_and_claim_jobs(conn, [Finish.of(job, done) for job in rest.claimed], None)
        store.deregister_worker(conn, worker_id)
    return found


def plan_line(plan: str) -> str:
    """A plan's execution time and its top node's buffers."""
    took = re.search(r"Execution Time: ([\d.]+) ms", plan)
    buffers = re.search(r"Buffers: ([^\n]+)", plan)
    shown = buffers.group(1).strip() if buffers else "no buffers"
    return f"{took.group(1) if took else '?'} ms; {shown}"


# -- the run ------------------------------------------------------------------------------
class Series:
    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {}

    def add(self, figures: dict[str, float]) -> None:
        for name, value in figures.items():
            self.values.setdefault(name, []).append(value)

    def median(self, name: str) -> float:
        return statistics.median(self.values[name])


def compare(
    dsn: str, empty: App, state: App, label: str, args: argparse.Namespace
) -> dict[str, Any]:
    """Rounds alternating the empty schema and the state's; the figures and ratios."""
    reference, measured = Series(), Series()
    for round_number in range(args.runs):
        order: list[tuple[App, Series]] = [(empty, reference), (state, measured)]
        if round_number % 2:
            order.reverse()
        for app, series in order:
            series.add(measure(app, dsn, args.jobs, args.batch))
        print(f"  {label}: round {round_number + 1} of {args.runs} done", flush=True)
    result: dict[str, Any] = {"state": label, "figures": {}}
    for name in ("enqueue", "claim", "finish", "idle claim"):
        unit = "ms" if name == "idle claim" else "jobs/s"
        ours, theirs = measured.median(name), reference.median(name)
        # For a time (ms) lower is better: the ratio is always "state / empty" of speed.
        ratio = theirs / ours if unit == "ms" else ours / theirs
        pairs = [
            (b / a if unit == "ms" else a / b)
            for a, b in zip(measured.values[name], reference.values[name], strict=True)
        ]
        result["figures"][name] = {
            "unit": unit,
            "state": measured.values[name],
            "empty": reference.values[name],
            "ratio": ratio,
        }
        fmt = "{:,.2f}" if unit == "ms" else "{:,.0f}"
        flag = "" if ratio >= 0.9 else "   << more than 10 % off the empty case"
        print(
            f"{label:24} {name:11} {fmt.format(ours):>9} vs empty {fmt.format(theirs):>9} {unit:6}"
            f" speed ratio {ratio:5.2f} [{min(pairs):.2f} .. {max(pairs):.2f}]{flag}"
        )
    return result


def main(argv: list[str] | None = None) -> int:
    from benchmarks import __main__ as runner

    args = parse_args(argv)
    dsn = runner.resolve_dsn(args.dsn)
    facts = runner.print_setting(dsn)
    load_before = os.getloadavg()
    print(
        f"jobs per step and round: {args.jobs}; batch {args.batch}; rounds: {args.runs};"
        " load average before: " + " ".join(f"{v:.2f}" for v in load_before)
    )
    states = [("future", size) for size in sizes(args.future)]
    states += [("history", size) for size in sizes(args.history)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        drop(conn, f"{PREFIX}empty")
    empty = make_app(dsn, f"{PREFIX}empty")
    plan_text: list[str] = []
    results: list[dict[str, Any]] = []

    def record_plans(label: str, app: App) -> None:
        for name, plan in plans(app, dsn, args.batch).items():
            print(f"  plan, {label}, {name}: {plan_line(plan)}")
            plan_text.append(f"=== {label}: {name}\n{plan}\n")

    record_plans("empty", empty)
    for kind, size in states:
        label = f"{kind} {size:,}"
        began = time.perf_counter()
        schema = prepare(dsn, kind, size, args.refill)
        print(f"{label}: ready in {time.perf_counter() - began:.0f} s", flush=True)
        state = make_app(dsn, schema)
        try:
            record_plans(label, state)
            results.append(compare(dsn, empty, state, label, args))
        finally:
            state.close()
    empty.close()
    print("load average after: " + " ".join(f"{v:.2f}" for v in os.getloadavg()))
    Path(args.plans).parent.mkdir(parents=True, exist_ok=True)
    Path(args.plans).write_text("\n".join(plan_text))
    Path(args.json).write_text(
        json.dumps(
            {
                "postgres": facts,
                "load_before": load_before,
                "jobs": args.jobs,
                "batch": args.batch,
                "states": results,
            },
            indent=2,
        )
    )
    print(f"written: {args.plans}, {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
