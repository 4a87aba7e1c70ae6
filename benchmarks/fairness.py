"""Fair queuing and sequences against a plain drain, and the starvation figure.

    python -m benchmarks.fairness [--dsn DSN] [--jobs N] [--runs R] [--concurrency C]
                                  [--tenants T] [--backlog A] [--small B] [--quick]

Drain: a real ``pgtasks worker`` process (concurrency C) drains N pre-enqueued no-op jobs,
jobs/s from the database's timestamps (first claim to last finish), as ``python -m
benchmarks``' processing figure: plain jobs; plain jobs that carry a tenant argument as
the keyed ones do, without a key (``tenant``: what the arguments cost, apart from the
features); the same with a fair key over T tenants (``fair_key=``); the same as sequences
over T keys (``sequence_key=``: N/T jobs a key, each key's one at a time). R rounds, the
order rotating each round; medians, each kind's median as a share of plain's, and the
median of each round's ratio to that round's plain and tenant drains (steadier: a single
drain moves by up to 20 %). Each drain starts on an analyzed table.

Starvation: tenant A enqueues A jobs, a worker (concurrency 10) starts on them, then tenant
B enqueues B jobs: how many of A's jobs start after B's enqueue returned and before the
last of B's starts, without fair keys (the same tasks' arguments, no key) and with them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.__main__ import SCHEMA, job_counts, reset_schema, resolve_dsn, worker_processes

KINDS = ("plain", "tenant", "fair", "sequence")


def _enqueue(kind: str, jobs: int, tenants: int) -> None:
    from benchmarks import app as bench

    for start in range(0, jobs, 5000):
        numbers = range(start, min(jobs, start + 5000))
        if kind == "plain":
            bench.noop.delay_many([{}] * len(numbers))
        elif kind == "tenant":
            bench.tenant_noop.delay_many([{"tenant": n % tenants} for n in numbers])
        elif kind == "fair":
            bench.fair_noop.delay_many([{"tenant": n % tenants} for n in numbers])
        else:
            bench.sequence_noop.delay_many([{"key": n % tenants} for n in numbers])


#: How often a drain's end is looked for. The rate comes from the jobs' own timestamps, so
#: this only sets how much of the server the benchmark's counting takes: a count of the
#: jobs every 50 ms cost 5 to 10 us of the server's time per job drained.
DRAIN_POLL = 0.25


def drain(dsn: str, kind: str, jobs: int, concurrency: int, tenants: int) -> float:
    """Jobs/s of one worker process draining ``jobs`` jobs of ``kind``."""
    reset_schema(dsn)
    _enqueue(kind, jobs, tenants)
    deadline = time.monotonic() + 900
    with psycopg.connect(dsn, autocommit=True) as conn:
        # The table as autovacuum leaves it soon after a bulk enqueue: without this, a
        # drain's plans depended on whether its analyze had run yet (a minute's naptime),
        # which made the figures of one kind differ by a third between runs.
        conn.execute(sql.SQL("ANALYZE {}.jobs").format(sql.Identifier(SCHEMA)))
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        worker_processes(1, "--concurrency", str(concurrency)),
    ):
        while job_counts(conn)[0] < jobs:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {kind} drain did not finish in 900 s")
            time.sleep(DRAIN_POLL)
        row = conn.execute(
            sql.SQL(
                "SELECT extract(epoch FROM max(finished_at) - min(locked_at)),"
                " count(*) FILTER (WHERE attempts <> 1) FROM {}.all_jobs"
            ).format(sql.Identifier(SCHEMA))
        ).fetchone()
    assert row is not None
    if int(row[1]):
        print(f"  !! {row[1]} {kind} job(s) ran more than once", file=sys.stderr)
    return jobs / float(row[0])


def starvation(dsn: str, backlog: int, small: int, fair: bool) -> int:
    """A's jobs started after B's enqueue returned and before B's last job started."""
    reset_schema(dsn)
    from benchmarks import app as bench

    task = bench.fair_noop if fair else bench.tenant_noop
    for start in range(0, backlog, 5000):
        task.delay_many([{"tenant": 0}] * min(5000, backlog - start))
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        worker_processes(1, "--concurrency", "10"),
    ):
        started = sql.SQL("SELECT count(*) FROM {}.all_jobs WHERE started_at IS NOT NULL").format(
            sql.Identifier(SCHEMA)
        )
        while _one(conn, started) < min(1000, backlog // 10):
            time.sleep(0.01)
        b_ids = [handle.id for handle in task.delay_many([{"tenant": 1}] * small)]
        b_enqueued = _one(conn, sql.SQL("SELECT clock_timestamp()"))
        while job_counts(conn)[0] < backlog + small:
            time.sleep(0.05)
        return int(
            _one(
                conn,
                sql.SQL(
                    "SELECT count(*) FROM {schema}.all_jobs WHERE id <> ALL(%(b)s)"
                    " AND started_at >= %(since)s AND started_at <= (SELECT max(started_at)"
                    " FROM {schema}.all_jobs WHERE id = ANY(%(b)s))"
                ).format(schema=sql.Identifier(SCHEMA)),
                {"b": b_ids, "since": b_enqueued},
            )
        )


def _one(conn: psycopg.Connection[Any], query: sql.Composed | sql.SQL, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fairness", description=__doc__)
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain")
    parser.add_argument("--runs", type=int, default=3, help="rounds (median)")
    parser.add_argument("--concurrency", type=int, default=10, help="the worker's concurrency")
    parser.add_argument("--tenants", type=int, default=1000, help="fair keys, sequence keys")
    parser.add_argument("--backlog", type=int, default=20_000, help="tenant A's jobs")
    parser.add_argument("--small", type=int, default=100, help="tenant B's jobs")
    parser.add_argument(
        "--kinds", default=",".join(KINDS), help="drains to run, comma-separated (plain first)"
    )
    parser.add_argument(
        "--no-starvation", action="store_true", help="leave the starvation figure out"
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, one round")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.runs, args.tenants, args.backlog, args.small = 600, 1, 30, 600, 10
    dsn = resolve_dsn(args.dsn)
    kinds = tuple(kind for kind in args.kinds.split(",") if kind in KINDS)
    if not kinds or kinds[0] != "plain":
        parser.error(f"--kinds must start with plain and name some of {', '.join(KINDS)}")
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    for round_number in range(args.runs):
        shift = round_number % len(kinds)
        order = kinds[shift:] + kinds[:shift]
        for kind in order:
            rate = drain(dsn, kind, args.jobs, args.concurrency, args.tenants)
            rates[kind].append(rate)
            print(f"round {round_number + 1}: {kind} {rate:,.0f} jobs/s", flush=True)
    medians = {kind: statistics.median(values) for kind, values in rates.items()}
    print(f"\ndrain of {args.jobs:,} no-op jobs, one worker at c{args.concurrency}, medians:")
    for kind in kinds:
        share = medians[kind] / medians["plain"]
        spread = f"{min(rates[kind]):,.0f} to {max(rates[kind]):,.0f}"
        print(f"  {kind:<9} {medians[kind]:>8,.0f} jobs/s  ({share:.0%} of plain; {spread})")
    references = [kind for kind in ("plain", "tenant") if kind in kinds]
    ratios: dict[str, dict[str, float]] = {}
    for reference in references:
        print(f"median of the rounds' ratios to the same round's {reference} drain:")
        for kind in kinds:
            pairs = zip(rates[kind], rates[reference], strict=True)
            per_round = [rate / base for rate, base in pairs]
            ratios.setdefault(reference, {})[kind] = statistics.median(per_round)
            print(
                f"  {kind:<9} {statistics.median(per_round):.0%}"
                f" ({min(per_round):.2f} to {max(per_round):.2f})"
            )
    figures: dict[str, object] = {"rates": rates, "medians": medians, "ratios": ratios}
    if not args.no_starvation:
        before = starvation(dsn, args.backlog, args.small, fair=False)
        after = starvation(dsn, args.backlog, args.small, fair=True)
        print(
            f"\nstarvation: A {args.backlog:,} jobs, then B {args.small:,}, one worker at c10:"
            f" A's jobs started after B's enqueue, before B's last start: {before:,} without"
            f" fair keys, {after:,} with them"
        )
        figures["starvation"] = [before, after]
    if args.json:
        with open(args.json, "w", encoding="utf-8") as output:
            json.dump(figures, output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
