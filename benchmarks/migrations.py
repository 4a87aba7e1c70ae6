"""Migrations on a live table: the longest stall of enqueues and claims while ``migrate``
runs, online (today's steps) against every step run in one blocking transaction (what the
migrations did before they had steps), in alternating rounds on the same server.

    python -m benchmarks --migrations [--dsn DSN] [--rows 2000000] [--rounds 3] [--quick]

Each round makes a schema at migration 0001, fills its jobs table with ``--rows`` rows
(99 % finished, 1 % pending, as a busy queue keeps them for a day), then runs a producer
and a consumer against it while migrating to the head version:

- the producer inserts one job per statement (autocommit), every 5 ms;
- the consumer claims up to 10 due jobs (``FOR UPDATE SKIP LOCKED``) and marks them done,
  as fast as it can.

Both use the columns of migration 0001 only, so they run at every version in between.
The figure is the longest time one of their statements took while the migration ran (a
statement that waits on a lock shows there), with their p50 and p99, and the same
figures with no migration running (the baseline). ``online`` is ``pgtasks migrate``
(lock_timeout 0.25 s, indexes built concurrently); ``blocking`` applies each migration's
steps in one transaction (CREATE INDEX without CONCURRENTLY, constraints validated under
the ALTER's lock). JSON goes to ``benchmarks/results/migrations.json``.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pgtasks._store.migrator import Migrator
from pgtasks._store.queries import Queries
from pgtasks.sql import Migration, load_migrations

ROOT = Path(__file__).resolve().parent.parent
#: Pause of the producer between two inserts (seconds).
PRODUCER_PAUSE = 0.005
#: Rows inserted per statement while filling the table.
FILL_CHUNK = 200_000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks --migrations", description=__doc__)
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows in the jobs table")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of each mode")
    parser.add_argument("--quick", action="store_true", help="100,000 rows, one round")
    parser.add_argument(
        "--json", default=str(ROOT / "benchmarks" / "results" / "migrations.json"), help="output"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.rounds = 100_000, 1
    return args


# -- the table -----------------------------------------------------------------------------
def create_schema_at_first_version(dsn: str, schema: str) -> None:
    """``schema`` at migration 0001 (the jobs table as it was first shipped)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        Migrator(Queries(schema), migrations=load_migrations()[:1]).migrate(conn)


def fill_jobs(dsn: str, schema: str, rows: int) -> None:
    """``rows`` jobs: 99 % done over the last day, 1 % pending and due; then VACUUM
    ANALYZE, as autovacuum would have left a table that old."""
    table = sql.Identifier(schema, "jobs")
    insert = sql.SQL(
        "INSERT INTO {} (task_name, queue, args, kwargs, max_attempts, status, attempts,"
        " run_at, finished_at, result, created_at)"
        " SELECT 'bench.task', 'q' || (n %% 4), jsonb_build_array(n), '{{}}', 5,"
        " CASE WHEN pending THEN 'pending' ELSE 'done' END, CASE WHEN pending THEN 0 ELSE 1 END,"
        " at, CASE WHEN pending THEN NULL ELSE at END,"
        " CASE WHEN pending THEN NULL ELSE 'null'::jsonb END, at"
        " FROM generate_series(%(low)s, %(high)s) AS n,"
        " LATERAL (SELECT n %% 100 = 0 AS pending,"
        "          now() - make_interval(secs => (%(rows)s - n) * 0.04) AS at) AS row_facts"
    ).format(table)
    with psycopg.connect(dsn, autocommit=True, options="-c synchronous_commit=off") as conn:
        for low in range(1, rows + 1, FILL_CHUNK):
            high = min(rows, low + FILL_CHUNK - 1)
            conn.execute(insert, {"rows": rows, "low": low, "high": high})
        conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(table))


def drop_schema(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


# -- the load ------------------------------------------------------------------------------
@dataclass
class Latencies:
    """Seconds each statement of one loop took, with when it started (monotonic)."""

    samples: list[tuple[float, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def between(self, start: float, end: float) -> list[float]:
        """Statements that ran (at least partly) between ``start`` and ``end``."""
        return [took for began, took in self.samples if began < end and began + took > start]


@dataclass(frozen=True)
class Summary:
    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, seconds: list[float]) -> Summary:
        if not seconds:
            return cls(0, 0.0, 0.0, 0.0)
        ordered = sorted(seconds)
        return cls(
            len(ordered),
            ordered[len(ordered) // 2] * 1000,
            ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
            ordered[-1] * 1000,
        )


class Load:
    """A producer and a consumer on ``schema``'s jobs table, on threads of their own."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn = dsn
        self.schema = schema
        self.stopping = threading.Event()
        self.enqueues = Latencies()
        self.claims = Latencies()
        self.threads = [
            threading.Thread(target=self._run, args=(self._produce, self.enqueues), daemon=True),
            threading.Thread(target=self._run, args=(self._consume, self.claims), daemon=True),
        ]
        table = sql.Identifier(schema, "jobs")
        self._insert = sql.SQL(
            "INSERT INTO {} (task_name, queue, args, kwargs, max_attempts)"
            " VALUES ('bench.task', 'q0', '[]', '{{}}', 5) RETURNING id"
        ).format(table)
        self._claim = sql.SQL(
            "UPDATE {table} SET status = 'running', attempts = attempts + 1, locked_at = now()"
            " WHERE id IN (SELECT id FROM {table} WHERE status = 'pending' AND run_at <= now()"
            " ORDER BY priority DESC, run_at, id LIMIT 10 FOR UPDATE SKIP LOCKED) RETURNING id"
        ).format(table=table)
        self._finish = sql.SQL(
            "UPDATE {} SET status = 'done', finished_at = now(), updated_at = now()"
            " WHERE id = ANY(%s) AND status = 'running'"
        ).format(table)

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(30)

    def _run(
        self, step: Callable[[psycopg.Connection[Any], Latencies], None], latencies: Latencies
    ) -> None:
        with psycopg.connect(
            self.dsn, autocommit=True, application_name="pgtasks migration load"
        ) as conn:
            while not self.stopping.is_set():
                try:
                    step(conn, latencies)
                except psycopg.Error as error:  # recorded: a statement must never fail
                    latencies.errors.append(f"{type(error).__name__}: {error}")
                    time.sleep(0.05)

    def _timed(self, latencies: Latencies, run: Callable[[], Any]) -> Any:
        began = time.monotonic()
        result = run()
        latencies.samples.append((began, time.monotonic() - began))
        return result

    def _produce(self, conn: psycopg.Connection[Any], latencies: Latencies) -> None:
        self._timed(latencies, lambda: conn.execute(self._insert).fetchall())
        self.stopping.wait(PRODUCER_PAUSE)

    def _consume(self, conn: psycopg.Connection[Any], latencies: Latencies) -> None:
        ids = [
            row[0] for row in self._timed(latencies, lambda: conn.execute(self._claim).fetchall())
        ]
        if ids:
            self._timed(latencies, lambda: conn.execute(self._finish, (ids,)))
        else:
            self.stopping.wait(PRODUCER_PAUSE)


@dataclass(frozen=True)
class StallReport:
    """Figures of one migration under load: seconds it took, statements of the load
    during it (enqueue, claim) and before it (the baseline), and errors of the load."""

    mode: str
    migrate_seconds: float
    enqueue: Summary
    claim: Summary
    baseline_enqueue: Summary
    baseline_claim: Summary
    errors: tuple[str, ...]

    @property
    def longest_stall_ms(self) -> float:
        return max(self.enqueue.max_ms, self.claim.max_ms)

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "migrate_seconds": self.migrate_seconds,
            "longest_stall_ms": self.longest_stall_ms,
            "enqueue": self.enqueue.__dict__,
            "claim": self.claim.__dict__,
            "baseline_enqueue": self.baseline_enqueue.__dict__,
            "baseline_claim": self.baseline_claim.__dict__,
            "errors": list(self.errors),
        }


def migrate_blocking(conn: psycopg.Connection[Any], store: Queries) -> None:
    """Every pending migration as one transaction, steps in their in-transaction form (how
    migrations ran before online steps)."""
    applied = store.get_applied_migrations(conn)
    for migration in load_migrations():
        if migration.version in applied:
            continue
        with conn.transaction():
            store.lock_migrations(conn)
            for step in migration.steps:
                store.run_migration_sql(conn, step.in_transaction_text())
            store.record_migration(conn, migration)


def migrate_under_load(
    dsn: str,
    schema: str,
    *,
    mode: str = "online",
    baseline_seconds: float = 2.0,
    migrate: Callable[[psycopg.Connection[Any]], object] | None = None,
) -> StallReport:
    """Run the load on ``schema`` (at any version), measure ``baseline_seconds`` of it,
    migrate to the head (``mode`` online or blocking, or ``migrate`` given), and report."""
    store = Queries(schema)
    with Load(dsn, schema) as load:
        time.sleep(baseline_seconds)
        began = time.monotonic()
        with psycopg.connect(dsn, autocommit=True, application_name="pgtasks migrate") as conn:
            if migrate is not None:
                migrate(conn)
            elif mode == "online":
                Migrator(store).migrate(conn)
            else:
                with conn.transaction():
                    store.create_migrations_table(conn)
                migrate_blocking(conn, store)
        ended = time.monotonic()
        time.sleep(0.2)  # statements that were waiting at the end are counted too
    return StallReport(
        mode=mode,
        migrate_seconds=ended - began,
        enqueue=Summary.of(load.enqueues.between(began, ended)),
        claim=Summary.of(load.claims.between(began, ended)),
        baseline_enqueue=Summary.of(load.enqueues.between(began - baseline_seconds, began)),
        baseline_claim=Summary.of(load.claims.between(began - baseline_seconds, began)),
        errors=tuple(load.enqueues.errors + load.claims.errors),
    )


@contextmanager
def first_version_table(dsn: str, rows: int) -> Iterator[str]:
    """A new schema at migration 0001 with ``rows`` jobs, dropped afterwards."""
    schema = f"bench_migrate_{secrets.token_hex(3)}"
    create_schema_at_first_version(dsn, schema)
    try:
        fill_jobs(dsn, schema, rows)
        yield schema
    finally:
        drop_schema(dsn, schema)


def head() -> Migration:
    return load_migrations()[-1]


# -- the command ---------------------------------------------------------------------------
def say(message: str) -> None:
    print(message, flush=True)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.__main__ import resolve_dsn

    args = parse_args(argv)
    dsn = resolve_dsn(args.dsn)
    say(
        f"migrations under load: {args.rows:,} rows at 0001 -> {head().version:04d},"
        f" {args.rounds} alternating round(s) of online and blocking"
    )
    reports: dict[str, list[StallReport]] = {"online": [], "blocking": []}
    for round_number in range(1, args.rounds + 1):
        order = ("online", "blocking") if round_number % 2 else ("blocking", "online")
        for mode in order:
            started = time.monotonic()
            with first_version_table(dsn, args.rows) as schema:
                filled = time.monotonic() - started
                report = migrate_under_load(dsn, schema, mode=mode)
            reports[mode].append(report)
            say(
                f"round {round_number} {mode:8}: migrate {report.migrate_seconds:6.2f} s;"
                f" longest stall {report.longest_stall_ms:8.1f} ms (enqueue max"
                f" {report.enqueue.max_ms:.1f}, p99 {report.enqueue.p99_ms:.1f}; claim max"
                f" {report.claim.max_ms:.1f}, p99 {report.claim.p99_ms:.1f}); baseline max"
                f" {max(report.baseline_enqueue.max_ms, report.baseline_claim.max_ms):.1f} ms;"
                f" {len(report.errors)} error(s); fill {filled:.0f} s"
            )
    say("")
    say(f"{'mode':10} {'longest stall ms (median)':>26} {'min':>9} {'max':>9} {'migrate s':>10}")
    summary: dict[str, Any] = {}
    for mode, runs in reports.items():
        stalls = [run.longest_stall_ms for run in runs]
        seconds = statistics.median(run.migrate_seconds for run in runs)
        summary[mode] = {"longest_stall_ms_median": statistics.median(stalls), "runs": stalls}
        say(
            f"{mode:10} {statistics.median(stalls):26.1f} {min(stalls):9.1f}"
            f" {max(stalls):9.1f} {seconds:10.2f}"
        )
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "rows": args.rows,
                "summary": summary,
                "rounds": {mode: [run.as_dict() for run in runs] for mode, runs in reports.items()},
            },
            indent=2,
        )
    )
    say(f"\nwritten: {path}")
    errors = [error for runs in reports.values() for run in runs for error in run.errors]
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
