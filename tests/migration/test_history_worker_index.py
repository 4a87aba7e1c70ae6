"""Migration 0027 on a populated jobs_history (partitioned by class and day): the index of
the workers' last jobs is built online partition by partition (pgtasks/_store/
partition_indexes.py), resumes what an earlier run left, ends valid with every partition's
index attached and named as a new schema names them; the workers page's read is then an
index probe per worker (EXPLAIN), exact however far back a worker's last jobs are."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgtasks._store.migrator import Migrator
from pgtasks._store.queries import Queries
from pgtasks.sql import load_migrations
from tests.support.schemas import drop_schema

Connection = psycopg.Connection[Any]
VERSION = 27
INDEX = "jobs_history_worker_idx"


@pytest.fixture
def schema(dsn: str) -> Iterator[str]:
    """A schema at the migration before 0027, with day partitions and finished jobs."""
    name = f"test_{secrets.token_hex(4)}"
    before = [m for m in load_migrations() if m.version < VERSION]
    with psycopg.connect(dsn, autocommit=True) as conn:
        Migrator(Queries(name), migrations=before).migrate(conn)
        assert Queries(name).prepare_history_days(conn)
        # 20 workers; worker 1 ran only long ago (its jobs are the oldest 30 of 20,000).
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.jobs_history (id, task_name, queue, args, kwargs, max_attempts,"
                " status, attempts, locked_by, locked_at, finished_at)"
                " SELECT n, 'task', 'q', '[]', '{{}}', 3,"
                " CASE WHEN n % 5 = 0 THEN 'failed' ELSE 'done' END, 1,"
                " CASE WHEN n <= 30 THEN 1 ELSE 2 + n % 19 END, at, at"
                " FROM generate_series(1, 20000) AS n,"
                " LATERAL (SELECT now() - make_interval(secs => 40000 - n) AS at) AS t"
            ).format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("ANALYZE {}.jobs_history").format(sql.Identifier(name)))
    yield name
    drop_schema(dsn, name)


def indexes(admin: Connection, schema: str) -> dict[str, tuple[str, bool, str | None]]:
    """Each index of jobs_history's tree on (locked_by, finished_at): its table, whether
    valid, the index it is attached to."""
    # The schema's indexes first (materialized): pg_get_indexdef() of another test's index
    # dropped meanwhile would fail ("could not open relation").
    rows = admin.execute(
        "WITH mine AS MATERIALIZED (SELECT i.indexrelid, ci.relname AS name,"
        " t.relname AS tab, i.indisvalid AS valid"
        " FROM pg_index i JOIN pg_class ci ON ci.oid = i.indexrelid"
        " JOIN pg_class t ON t.oid = i.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace"
        " WHERE n.nspname = %s AND t.relname LIKE 'jobs_history%%')"
        " SELECT name, tab, valid,"
        " (SELECT p.relname FROM pg_inherits h JOIN pg_class p ON p.oid = h.inhparent"
        "  WHERE h.inhrelid = mine.indexrelid)"
        " FROM mine WHERE pg_get_indexdef(mine.indexrelid) LIKE '%%(locked_by, finished_at)'",
        (schema,),
    ).fetchall()
    return {name: (table, valid, parent) for name, table, valid, parent in rows}


def leaves(admin: Connection, schema: str) -> list[str]:
    rows = admin.execute(
        "SELECT c.relname FROM pg_partition_tree(%s::regclass) t"
        " JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf ORDER BY 1",
        (f"{schema}.jobs_history",),
    ).fetchall()
    return [row[0] for row in rows]


def test_the_index_is_built_online_per_partition_and_resumes_a_stopped_run(
    schema: str, dsn: str, admin: Connection
) -> None:
    days = [name for name in leaves(admin, schema) if not name.endswith("_default")]
    assert days, "the day partitions were made"
    # A run stopped after the partitioned table's index and one leaf's build, before attaching.
    made = f"{days[0]}_locked_by_finished_at_idx"
    admin.execute(
        sql.SQL("CREATE INDEX {} ON ONLY {}.jobs_history (locked_by, finished_at)").format(
            sql.Identifier(INDEX), sql.Identifier(schema)
        )
    )
    admin.execute(
        sql.SQL("CREATE INDEX {} ON {}.{} (locked_by, finished_at)").format(
            sql.Identifier(made), sql.Identifier(schema), sql.Identifier(days[0])
        )
    )
    assert indexes(admin, schema)[INDEX][1] is False

    with psycopg.connect(dsn, autocommit=True) as conn:
        applied = Migrator(Queries(schema)).migrate(conn)

    # This migration, then any later ones.
    assert [m.version for m in applied if m.version <= VERSION] == [VERSION]
    found = indexes(admin, schema)
    assert found[INDEX] == ("jobs_history", True, None)
    attached = {table: (name, valid, parent) for name, (table, valid, parent) in found.items()}
    for leaf in leaves(admin, schema):
        name, valid, parent = attached[leaf]
        assert valid and parent is not None, (leaf, attached[leaf])
        assert name == f"{leaf}_locked_by_finished_at_idx"  # as a new schema names it
    assert attached["jobs_history_done"][2] == INDEX
    assert attached[days[0]][0] == made  # the index the stopped run built, kept


def test_the_last_jobs_of_each_worker_are_an_index_probe_each_and_exact(
    schema: str, dsn: str, admin: Connection
) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        Migrator(Queries(schema)).migrate(conn)
    queries = Queries(schema)
    workers = [1, *range(2, 21)]
    with psycopg.connect(dsn, cursor_factory=psycopg.ClientCursor) as conn:
        plan = "\n".join(
            row[0]
            for row in conn.execute(
                b"EXPLAIN " + queries._statements["list_recent_worker_jobs"],
                {"worker_ids": workers, "per_worker": 10},
            )
        )
        rows = queries.list_recent_worker_jobs(conn, workers, per_worker=10)
    assert "locked_by_finished_at_idx" in plan, plan
    assert "Seq Scan on jobs_history" not in plan, plan
    oldest = [row["id"] for row in rows if row["locked_by"] == 1]
    assert oldest == list(range(30, 20, -1))  # far behind the newest 5,000: still found
    assert len(rows) == 10 * len(workers)
    expected = admin.execute(
        sql.SQL(
            "SELECT id FROM {}.jobs_history WHERE locked_by = 7 ORDER BY finished_at DESC LIMIT 10"
        ).format(sql.Identifier(schema))
    ).fetchall()
    assert [row["id"] for row in rows if row["locked_by"] == 7] == [row[0] for row in expected]
