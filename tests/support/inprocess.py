"""A Worker running in a thread of the test process, and SQL on the test's schema.

``{schema}`` in the queries of :func:`select` and :func:`execute` is the app's schema.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql

from pgtasks import App, JobHandle, JobRow, Worker
from pgtasks._worker.pruner import prune as prune
from tests.support.waiting import wait_until

#: Worker options that keep tests fast; a test overrides what it is about.
FAST: dict[str, Any] = {
    "concurrency": 2,
    "poll_interval": 0.1,
    "lease_timeout": 5.0,
    "heartbeat_interval": 1.0,
    "rescue_interval": 1.0,
    "shutdown_timeout": 2.0,
}

#: Worker options at the App's defaults (poll interval, lease, heartbeat, rescue and
#: concurrency), for tests that check a promise as users meet it.
DEFAULT_SETTINGS: dict[str, Any] = {
    "concurrency": 10,
    "poll_interval": None,
    "lease_timeout": None,
    "heartbeat_interval": None,
    "rescue_interval": None,
}


@contextlib.contextmanager
def running_worker(app: App, **options: Any) -> Iterator[Worker]:
    """A Worker running ``run()`` in a thread, registered when yielded, always stopped after."""
    worker = Worker(app, **{**FAST, **options})
    failures: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as error:
            failures.append(error)

    thread = threading.Thread(target=run, name="test-worker", daemon=True)
    thread.start()
    wait_until(
        lambda: worker.worker_id is not None or not thread.is_alive(),
        message="the worker to register",
    )
    if failures:
        raise failures[0]
    try:
        yield worker
    finally:
        worker.stop(timeout=1.0)
        thread.join(10)
    assert not thread.is_alive(), "the worker thread did not end after stop()"
    if failures:
        raise failures[0]


class Gates:
    """Events that hold tasks; ``open_all()`` (at teardown) leaves no thread blocked."""

    def __init__(self) -> None:
        self._events: list[threading.Event] = []

    def __call__(self) -> threading.Event:
        event = threading.Event()
        self._events.append(event)
        return event

    def open_all(self) -> None:
        for event in self._events:
            event.set()


def finished(handle: JobHandle[Any], timeout: float = 10.0) -> JobRow:
    """Wait until the job is done, failed or cancelled; return its row."""
    wait_until(lambda: handle.status().is_finished, timeout=timeout, message=f"job {handle.id}")
    return handle.fetch()


def select(
    conn: psycopg.Connection[Any], app: App, query: str, params: Any = None
) -> list[tuple[Any, ...]]:
    """Run ``query`` with ``{schema}`` as the app's schema; return its rows."""
    statement = sql.SQL(query).format(schema=sql.Identifier(app.schema))
    return conn.execute(statement, params).fetchall()


def execute(conn: psycopg.Connection[Any], app: App, query: str, params: Any = None) -> int:
    """Run a statement with ``{schema}`` as the app's schema; return the rows it changed."""
    statement = sql.SQL(query).format(schema=sql.Identifier(app.schema))
    return conn.execute(statement, params).rowcount


def recorded_runs(conn: psycopg.Connection[Any], app: App, job_id: int) -> list[tuple[int, int]]:
    """(attempt, pid) of each run of the job recorded in the executions side table."""
    rows = select(
        conn,
        app,
        "SELECT attempt, pid FROM {schema}.executions WHERE job_id = %s ORDER BY id",
        [job_id],
    )
    return [(row[0], row[1]) for row in rows]


def registered_workers(conn: psycopg.Connection[Any], app: App) -> list[int]:
    return [row[0] for row in select(conn, app, "SELECT id FROM {schema}.workers ORDER BY id")]


def running_job_count(conn: psycopg.Connection[Any], app: App) -> int:
    rows = select(conn, app, "SELECT count(*) FROM {schema}.all_jobs WHERE status = 'running'")
    return int(rows[0][0])


def is_listening(conn: psycopg.Connection[Any], app: App) -> bool:
    """True once some session has run LISTEN on the app's channels: its last statement is
    a LISTEN, or the read of the paused queues a worker's listener runs after it (and,
    for a worker started without limits, the count of stored limits that follows)."""
    statements = [
        sql.SQL("LISTEN {}").format(sql.Identifier(channel)).as_string(conn)
        for channel in (app.queries.channel, app.queries.cancel_channel)
    ]
    # The read of the paused queues has a parameter (the worker's host): the server shows
    # it with $1 where the statement has a placeholder, so it is matched by its header.
    statements.append(app.queries._statements["count_limits"].decode())
    paused = app.queries._statements["get_paused_queues"].decode().splitlines()[0]
    rows = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE query = ANY(%s) OR starts_with(query, %s)",
        [statements, paused + "\n"],
    ).fetchall()
    return bool(rows[0][0])
