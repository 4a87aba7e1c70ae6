"""jobs_history in an app of several stores: each store's schema keeps its own history, an
id names its store whether its job waits or finished, each store's dashboard shows its
finished jobs, and each store's pruner drops only that store's days."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from pgtasks import App
from pgtasks._worker.pruner import prune
from pgtasks.web import asgi
from tests.support.inprocess import running_worker
from tests.support.web import Client


def count(conn: psycopg.Connection[Any], schema: str, relation: str, where: str = "true") -> int:
    query = sql.SQL("SELECT count(*) FROM {} WHERE " + where).format(
        sql.Identifier(schema, relation)
    )
    row = conn.execute(query).fetchone()
    return int(row[0]) if row else 0


def test_each_store_keeps_its_history_and_ids_find_it(
    make_stores_app: Callable[..., App], dsn: str
) -> None:
    app = make_stores_app(routes={"emails": "bulk"})
    schemas: dict[str, str] = app.schemas  # type: ignore[attr-defined]

    @app.task(name="hist.plain")
    def plain(n: int) -> int:
        return n * 2

    @app.task(name="hist.mail", queue="emails")
    def mail(n: int) -> int:
        return n + 1

    here, there = plain.delay(2), mail.delay(3)
    assert (here.id >> 48, there.id >> 48) == (0, 1)
    with running_worker(app, store="bulk"), running_worker(app, store="default"):
        assert app.get_job(there.id).get(timeout=20) == 4
        assert app.get_job(here.id).get(timeout=20) == 4
    with psycopg.connect(dsn) as conn:
        for schema, job_id, other in (
            (schemas["default"], here.id, there.id),
            (schemas["bulk"], there.id, here.id),
        ):
            assert count(conn, schema, "jobs") == 0
            assert count(conn, schema, "jobs_history", f"id = {job_id}") == 1
            assert count(conn, schema, "jobs_history", f"id = {other}") == 0
    # By id alone, from history: the store the id names.
    assert app.get_job(there.id).status() == "done"
    assert [(row.id, row.status) for row in app.get_jobs([there.id, here.id])] == [
        (here.id, "done"),
        (there.id, "done"),
    ]
    dashboard = asgi(app)
    web = Client(dashboard)
    try:
        page = web.get(f"/stores/bulk/jobs/{there.id}")
        assert page.status_code == 200 and "hist.mail" in page.text
        done = web.get("/stores/bulk/jobs?status=done")
        assert done.status_code == 200
        assert f"/stores/bulk/jobs/{there.id}" in done.text
        assert f"/jobs/{here.id}" not in done.text.replace(f"/stores/bulk/jobs/{there.id}", "")
        moved = web.get(f"/jobs/{there.id}")
        assert moved.headers["location"] == f"/stores/bulk/jobs/{there.id}"
        assert "hist.plain" in web.get(f"/jobs/{here.id}").text
    finally:
        dashboard.close()


def fill_old_day(conn: psycopg.Connection[Any], schema: str, first_id: int, rows: int) -> None:
    """A finished day three days back in ``schema``'s history, as finishes would fill it."""
    history = sql.Identifier(schema)
    conn.execute(
        sql.SQL("SELECT * FROM {}.jobs_history_create_days(now() - interval '3 days', 0)").format(
            history
        )
    )
    conn.execute(
        sql.SQL(
            "INSERT INTO {}.jobs_history (id, task_name, queue, args, kwargs, status, attempts,"
            " max_attempts, finished_at)"
            " SELECT %s + i, 't', 'q', '[]', '{{}}', 'done', 1, 1,"
            " date_trunc('day', now() - interval '3 days') + interval '1 hour'"
            " FROM generate_series(1, %s) AS i"
        ).format(history),
        [first_id, rows],
    )


def old_days(conn: psycopg.Connection[Any], schema: str) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_tables WHERE schemaname = %s"
        " AND tablename = 'jobs_history_done_p' || to_char(now() - interval '3 days', 'YYYYMMDD')",
        [schema],
    ).fetchone()
    return int(row[0]) if row else 0


def test_each_store_prunes_its_own_days(make_stores_app: Callable[..., App], dsn: str) -> None:
    app = make_stores_app(routes={"emails": "bulk"})
    schemas: dict[str, str] = app.schemas  # type: ignore[attr-defined]
    with psycopg.connect(dsn, autocommit=True) as conn:
        # History days are named by their UTC date: the test's own day arithmetic too,
        # whatever the server's time zone (between 00:00 and 06:00 UTC a zone west of
        # UTC is on the day before).
        conn.execute("SET TIME ZONE 'UTC'")
        fill_old_day(conn, schemas["default"], 0, 50)
        fill_old_day(conn, schemas["bulk"], 1 << 48, 70)
        assert (old_days(conn, schemas["default"]), old_days(conn, schemas["bulk"])) == (1, 1)
        bulk = app.for_store("bulk")
        result = bulk.database.run(
            lambda owned: prune(bulk.queries, owned, done_after=86400.0, failed_after=None)
        )
        assert (result.days_dropped, result.deleted["done"]) == (1, 70)
        assert (old_days(conn, schemas["default"]), old_days(conn, schemas["bulk"])) == (1, 0)
        assert count(conn, schemas["default"], "jobs_history") == 50
        assert count(conn, schemas["bulk"], "jobs_history") == 0
        default = app.for_store("default")
        result = default.database.run(
            lambda owned: prune(default.queries, owned, done_after=86400.0, failed_after=None)
        )
        assert (result.days_dropped, result.deleted["done"]) == (1, 50)
        assert count(conn, schemas["default"], "jobs_history") == 0
