"""Enqueues and claims go on while ``migrate`` runs on a large jobs table.

A producer and a consumer (benchmarks/migrations.py: one insert every 5 ms, claims of 10
with FOR UPDATE SKIP LOCKED) run against a schema at migration 0001 holding
PGTASKS_TEST_MIGRATION_ROWS jobs (50,000 by default; CI's pass on PostgreSQL 15 uses
2,000,000) while every later migration is applied online. The longest time one of their
statements took is the stall. The bound is generous, a correctness check and not a
performance figure (`python -m benchmarks --migrations` measures those): at 2,000,000
rows a statement queued behind a blocking index build waits seconds (1.7 to 2.8 s
measured, against 0.07 to 0.27 s online).

The durable migrations (durable, parked_jobs_index: new tables and functions, an index
built concurrently) are also measured on their own: the table is first migrated to the
version before them, then they run under the load.
"""

from __future__ import annotations

import os

import pytest
from psycopg import connect, sql

from benchmarks.migrations import first_version_table, migrate_under_load
from pgtasks._store.migrator import Migrator
from pgtasks._store.queries import Queries
from pgtasks.sql import load_migrations

#: Rows in the jobs table when migrate starts.
ROWS = int(os.environ.get("PGTASKS_TEST_MIGRATION_ROWS", "50000"))
#: Longest acceptable stall of an enqueue or a claim (seconds): the goal is under 1 s.
STALL_BOUND = 1.5


@pytest.mark.timeout(300)
def test_enqueues_and_claims_go_on_while_migrate_runs_on_a_large_table(dsn: str) -> None:
    with first_version_table(dsn, ROWS) as schema:
        report = migrate_under_load(dsn, schema, mode="online", baseline_seconds=1.0)
        with connect(dsn) as conn:
            version = conn.execute(
                sql.SQL("SELECT max(version) FROM {}").format(sql.Identifier(schema, "migrations"))
            ).fetchone()

    print(
        f"\nmigrate online on {ROWS:,} rows: {report.migrate_seconds:.2f} s; longest stall"
        f" {report.longest_stall_ms:.0f} ms (enqueue p99 {report.enqueue.p99_ms:.1f} ms, max"
        f" {report.enqueue.max_ms:.0f} ms over {report.enqueue.count}; claim p99"
        f" {report.claim.p99_ms:.1f} ms, max {report.claim.max_ms:.0f} ms over"
        f" {report.claim.count}); baseline max"
        f" {max(report.baseline_enqueue.max_ms, report.baseline_claim.max_ms):.0f} ms"
    )
    assert version == (load_migrations()[-1].version,)
    assert report.errors == ()
    assert report.enqueue.count > 0 and report.claim.count > 0
    assert report.longest_stall_ms < STALL_BOUND * 1000, report.as_dict()


def durable_versions() -> list[int]:
    return [m.version for m in load_migrations() if m.name in ("durable", "parked_jobs_index")]


@pytest.mark.timeout(300)
def test_the_durable_migrations_do_not_stall_writes_on_a_large_table(dsn: str) -> None:
    first = durable_versions()[0]
    with first_version_table(dsn, ROWS) as schema:
        with connect(dsn, autocommit=True) as conn:  # up to the version before durable
            Migrator(Queries(schema), migrations=load_migrations()[: first - 1]).migrate(conn)
        report = migrate_under_load(dsn, schema, mode="online", baseline_seconds=1.0)

    print(
        f"\nmigrations {first:04d}..{len(load_migrations()):04d} online on {ROWS:,} rows:"
        f" {report.migrate_seconds:.2f} s; longest stall {report.longest_stall_ms:.0f} ms"
        f" (enqueue p99 {report.enqueue.p99_ms:.1f} ms, max {report.enqueue.max_ms:.0f} ms"
        f" over {report.enqueue.count}; claim p99 {report.claim.p99_ms:.1f} ms, max"
        f" {report.claim.max_ms:.0f} ms over {report.claim.count}); baseline max"
        f" {max(report.baseline_enqueue.max_ms, report.baseline_claim.max_ms):.0f} ms"
    )
    assert len(durable_versions()) == 2
    assert report.errors == ()
    assert report.enqueue.count > 0 and report.claim.count > 0
    assert report.longest_stall_ms < STALL_BOUND * 1000, report.as_dict()
