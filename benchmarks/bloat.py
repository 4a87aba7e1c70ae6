"""Bloat resilience: throughput after many jobs went through one table, and while an
open transaction pins the xmin horizon.

    python -m benchmarks.bloat [--dsn DSN] [--through 1000000] [--pin-seconds 180]
                               [--window 20] [--concurrency 50] [--prefetch 150] [--quick]

Jobs flow the whole time: one ``pgtasks worker`` process drains while a feeder in this
process keeps 50,000 to 60,000 jobs pending (``delay_many`` in batches of 10,000), as a
steady production load would. Throughput is read from the database: jobs whose
``finished_at`` falls in each one-second slice (the slices trail the clock by one second
so that every finish in them has committed). Phases, on one table, in one run:

1. **fresh**: a new schema; the rate over ``--window`` seconds after a short warm-up.
2. **after N through**: jobs keep flowing until ``--through`` jobs in all are done (the
   finished rows stay, as they do for a day by default); then the rate over a window.
3. **xmin pinned**: another connection to the same database opens a REPEATABLE READ
   transaction and reads the jobs table, so no row version newer than its snapshot can be
   removed; jobs keep flowing for ``--pin-seconds``; the rate per window and over the
   whole pin.
4. **released**: the transaction ends; jobs keep flowing; the rate per window until it is
   back to 95 % of phase 2 (or ``--recovery-seconds`` pass).

Ratios printed: phase 2 / phase 1 (target ≥ 80 %), phase 3 / phase 2 (loss target ≤ 20 %),
and the recovery. JSON goes to ``benchmarks/results/bloat.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.__main__ import (
    ROOT,
    SCHEMA,
    print_setting,
    reset_schema,
    resolve_dsn,
    worker_processes,
)

#: Pending jobs kept ahead of the worker, counted from finishes that trail the clock by
#: up to two seconds: enough that the worker never runs dry between top-ups.
BACKLOG_LOW = 50_000
BATCH = 10_000
TICK = 0.2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bloat", description=__doc__)
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--through", type=int, default=1_000_000, help="jobs before phase 2")
    parser.add_argument("--pin-seconds", type=float, default=180.0, help="xmin pinned for")
    parser.add_argument("--window", type=float, default=20.0, help="seconds per measurement")
    parser.add_argument("--recovery-seconds", type=float, default=120.0, help="at most")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--prefetch", type=int, default=150)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    parser.add_argument(
        "--json", default=str(ROOT / "benchmarks" / "results" / "bloat.json"), help="output"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.through, args.pin_seconds, args.window, args.recovery_seconds = 20_000, 4, 2, 6
    return args


@dataclass
class Flow:
    """Keeps jobs pending and counts finishes per one-second slice of the server clock."""

    conn: psycopg.Connection[Any]
    enqueued: int = 0
    done: int = 0
    # (slice end as seconds since the epoch, jobs finished in the slice)
    slices: list[tuple[float, int]] = field(default_factory=list)
    _counted_to: float | None = None

    def server_now(self) -> float:
        row = self.conn.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()
        assert row is not None
        return float(row[0])

    def step(self) -> None:
        """Count the finished slices that are complete, then top the backlog up."""
        now = self.server_now()
        if self._counted_to is None:
            self._counted_to = float(int(now))
        while self._counted_to + 1.0 <= now - 1.0:
            start = self._counted_to
            row = self.conn.execute(
                sql.SQL(
                    "SELECT count(*) FROM {}.all_jobs"
                    " WHERE status IN ('done', 'failed', 'cancelled')"
                    " AND finished_at >= to_timestamp(%s) AND finished_at < to_timestamp(%s)"
                ).format(sql.Identifier(SCHEMA)),
                (start, start + 1.0),
            ).fetchone()
            assert row is not None
            self.slices.append((start + 1.0, int(row[0])))
            self.done += int(row[0])
            self._counted_to = start + 1.0
        from benchmarks.app import noop

        while self.enqueued - self.done < BACKLOG_LOW:
            noop.delay_many([{}] * BATCH)
            self.enqueued += BATCH

    def run_for(self, seconds: float) -> list[tuple[float, int]]:
        """Flow for ``seconds``; return the slices that ended in that time."""
        first = len(self.slices)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.step()
            time.sleep(TICK)
        # Let the trailing slices be counted.
        settle = time.monotonic() + 2.5
        while time.monotonic() < settle:
            self.step()
            time.sleep(TICK)
        return self.slices[first:]

    def rate(self, seconds: float) -> float:
        slices = self.run_for(seconds)
        # Drop the partial slice at each end.
        inner = slices[1:-1] or slices
        return sum(count for _, count in inner) / max(1, len(inner))


@contextmanager
def pinned_xmin(dsn: str) -> Iterator[int]:
    """A REPEATABLE READ transaction that has read the jobs table (its snapshot pins xmin)."""
    with psycopg.connect(dsn) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with conn.transaction():
            row = conn.execute(
                sql.SQL("SELECT count(*) FROM {}.jobs").format(sql.Identifier(SCHEMA))
            ).fetchone()
            assert row is not None
            backend_xmin = conn.execute(
                "SELECT backend_xmin::text::bigint FROM pg_stat_activity"
                " WHERE pid = pg_backend_pid()"
            ).fetchone()
            yield int(backend_xmin[0]) if backend_xmin and backend_xmin[0] else 0


def table_facts(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    row = conn.execute(
        "SELECT n_live_tup, n_dead_tup, autovacuum_count, pg_total_relation_size(relid),"
        " pg_relation_size(%s::regclass)"
        " FROM pg_stat_user_tables WHERE schemaname = %s AND relname = 'jobs'",
        (f"{SCHEMA}.jobs_claim_idx", SCHEMA),
    ).fetchone()
    assert row is not None
    return {
        "live_rows": int(row[0]),
        "dead_rows": int(row[1]),
        "autovacuums": int(row[2]),
        "total_mb": round(int(row[3]) / 2**20, 1),
        "claim_index_mb": round(int(row[4]) / 2**20, 1),
    }


def say(message: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {message}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dsn = resolve_dsn(args.dsn)
    facts = print_setting(dsn)
    print(
        f"worker: 1 process, concurrency {args.concurrency}, prefetch {args.prefetch};"
        f" backlog kept at {BACKLOG_LOW:,}+ pending\n"
    )
    reset_schema(dsn)
    results: dict[str, Any] = {
        "machine": {"cores": os.cpu_count()},
        "postgres": facts,
        "settings": vars(args) | {"dsn": None},
    }
    worker_flags = ("--concurrency", str(args.concurrency), "--prefetch", str(args.prefetch))
    with psycopg.connect(dsn, autocommit=True) as conn, worker_processes(1, *worker_flags):
        flow = Flow(conn)
        flow.run_for(min(5.0, args.window))  # warm-up: worker start, first claims
        fresh = flow.rate(args.window)
        results["fresh"] = {"rate": fresh, "table": table_facts(conn)}
        say(f"fresh table: {fresh:,.0f} jobs/s  {results['fresh']['table']}")

        last_report = time.monotonic()
        while flow.done < args.through:
            flow.step()
            time.sleep(TICK)
            if time.monotonic() - last_report > 15:
                last_report = time.monotonic()
                say(f"  {flow.done:,} jobs done so far")
        through = flow.rate(args.window)
        results["after_through"] = {
            "jobs_done": flow.done,
            "rate": through,
            "table": table_facts(conn),
        }
        say(
            f"after {flow.done:,} jobs through the table: {through:,.0f} jobs/s"
            f" ({through / fresh:.0%} of fresh)  {results['after_through']['table']}"
        )

        pinned_windows: list[float] = []
        with pinned_xmin(dsn) as xmin:
            say(f"xmin pinned at {xmin} by a REPEATABLE READ transaction")
            pin_started = time.monotonic()
            pinned_slices: list[tuple[float, int]] = []
            while time.monotonic() - pin_started < args.pin_seconds:
                window = min(args.window, args.pin_seconds - (time.monotonic() - pin_started))
                slices = flow.run_for(max(1.0, window))
                pinned_slices.extend(slices)
                pinned_windows.append(sum(c for _, c in slices) / max(1, len(slices)))
                say(
                    f"  pinned {time.monotonic() - pin_started:5.0f} s:"
                    f" {pinned_windows[-1]:,.0f} jobs/s  {table_facts(conn)}"
                )
            pinned_table = table_facts(conn)
        pinned = sum(c for _, c in pinned_slices) / max(1, len(pinned_slices))
        results["pinned"] = {
            "xmin": xmin,
            "seconds": args.pin_seconds,
            "rate": pinned,
            "windows": pinned_windows,
            "min_window": min(pinned_windows),
            "table": pinned_table,
        }
        say(
            f"xmin pinned for {args.pin_seconds:.0f} s: {pinned:,.0f} jobs/s on average"
            f" (loss {1 - pinned / through:.0%}), worst window {min(pinned_windows):,.0f}"
        )

        released_at = time.monotonic()
        recovery: list[tuple[float, float]] = []
        recovered_after: float | None = None
        while time.monotonic() - released_at < args.recovery_seconds:
            rate = flow.rate(min(args.window, 10.0))
            elapsed = time.monotonic() - released_at
            recovery.append((elapsed, rate))
            say(f"  released {elapsed:5.0f} s: {rate:,.0f} jobs/s  {table_facts(conn)}")
            if rate >= 0.95 * through:
                recovered_after = elapsed
                break
        results["released"] = {
            "windows": recovery,
            "recovered_after_seconds": recovered_after,
            "last_rate": recovery[-1][1] if recovery else None,
            "table": table_facts(conn),
        }
        duplicates = conn.execute(
            sql.SQL(
                "SELECT coalesce(sum(attempts - 1) FILTER (WHERE attempts > 1), 0) FROM {}.all_jobs"
            ).format(sql.Identifier(SCHEMA))
        ).fetchone()
        results["duplicates"] = int(duplicates[0]) if duplicates else None

    last = recovery[-1][1] if recovery else 0.0
    print("\nbloat resilience (jobs/s, one worker process, jobs flowing throughout)")
    print(f"  fresh table                         {fresh:>10,.0f}")
    print(
        f"  after {results['after_through']['jobs_done']:>9,} jobs through it  {through:>10,.0f}"
        f"   {through / fresh:6.0%} of fresh (target >= 80%)"
    )
    print(
        f"  xmin pinned {args.pin_seconds:>5.0f} s (average)       {pinned:>10,.0f}"
        f"   loss {1 - pinned / through:5.0%} (target <= 20%);"
        f" worst window {min(pinned_windows):,.0f}"
    )
    print(
        f"  after release                       {last:>10,.0f}   {last / through:6.0%};"
        + (
            f" back to >= 95% after {recovered_after:.0f} s"
            if recovered_after is not None
            else f" not back to 95% within {args.recovery_seconds:.0f} s"
        )
    )
    print(f"  executions beyond one per job: {results['duplicates']}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2))
    print(f"\nwritten: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
