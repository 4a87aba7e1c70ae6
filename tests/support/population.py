"""Known job and worker populations for operations tests, written with plain SQL.

Rows are inserted as they would look in a given status (finished_at, run_at, lock set
directly), so a test controls exactly which rows are past a retention or due.
"""

from __future__ import annotations

from typing import Any

import psycopg

from pgtasks import App
from tests.support.inprocess import execute, select

Connection = psycopg.Connection[Any]

DAY = 86400.0


def insert_job(
    conn: Connection,
    app: App,
    *,
    status: str = "pending",
    queue: str = "default",
    task: str = "ops.task",
    finished_ago: float | None = None,
    run_in: float = 0.0,
    attempts: int = 0,
    max_attempts: int = 3,
    locked_by: int | None = None,
    last_error: str | None = None,
    args: str = "[]",
    kwargs: str = "{}",
) -> int:
    """Insert one job row as it would look in ``status``; return its id."""
    rows = select(
        conn,
        app,
        "INSERT INTO {schema}.jobs (task_name, queue, args, kwargs, status, attempts,"
        " max_attempts, run_at, finished_at, locked_by, locked_at, last_error)"
        " VALUES (%(task)s, %(queue)s, %(args)s, %(kwargs)s, %(status)s, %(attempts)s,"
        " %(max_attempts)s, now() + make_interval(secs => %(run_in)s),"
        " now() - make_interval(secs => %(finished_ago)s), %(locked_by)s,"
        " CASE WHEN %(locked_by)s::bigint IS NULL THEN NULL ELSE now() END, %(last_error)s)"
        " RETURNING id",
        {
            "task": task,
            "queue": queue,
            "status": status,
            "attempts": attempts,
            "max_attempts": max_attempts,
            "run_in": run_in,
            "finished_ago": finished_ago,
            "locked_by": locked_by,
            "last_error": last_error,
            "args": args,
            "kwargs": kwargs,
        },
    )
    return int(rows[0][0])


def job_ids(conn: Connection, app: App) -> set[int]:
    return {row[0] for row in select(conn, app, "SELECT id FROM {schema}.all_jobs")}


def register(conn: Connection, app: App, *, pid: int = 1, heartbeat_ago: float = 0.0) -> int:
    worker_id = app.queries.register_worker(
        conn, hostname="host", pid=pid, queues=None, concurrency=4
    )
    execute(
        conn,
        app,
        "UPDATE {schema}.workers SET heartbeat_at = now() - make_interval(secs => %s)"
        " WHERE id = %s",
        [heartbeat_ago, worker_id],
    )
    return worker_id
