"""The app that acceptance tests run in real ``pgtasks worker`` processes.

Configured from the environment: ``PGTASKS_DSN`` and ``PGTASKS_TEST_SCHEMA`` (the
test's migrated schema). Every task records each execution (job id, attempt, worker
id, pid, started, finished) in ``<schema>.executions``, a side table the test creates
with :func:`create_executions_table`; exactly-once and rescue checks count those rows.

The module-level ``app`` is built on first access (``pgtasks worker -A
tests.apps.worker_app:app``), so a test process can import :func:`register_tasks` to
enqueue the same task names on its own App without these environment variables.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pgtasks import App, JobContext
from tests.apps import lazy_app
from tests.apps._environment import environment_app

#: Seconds a task keeps retrying its side-table write while the database is away.
RECORD_RETRY_SECONDS = 20.0


def create_executions_table(conn: psycopg.Connection[Any], schema: str) -> None:
    """The side table every task of this app writes to (run by the test after migrating)."""
    conn.execute(
        sql.SQL(
            "CREATE TABLE {}.executions ("
            " id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
            " token uuid NOT NULL UNIQUE,"
            " job_id bigint NOT NULL,"
            " attempt integer NOT NULL,"
            " worker_id bigint NOT NULL,"
            " pid integer NOT NULL,"
            " started timestamptz NOT NULL DEFAULT clock_timestamp(),"
            " finished timestamptz)"
        ).format(sql.Identifier(schema))
    )


class Recorder:
    """Writes execution rows on one connection per process, shared under a lock.

    A broken connection (database restart) is replaced and the statement retried for up
    to RECORD_RETRY_SECONDS, so an outage does not turn into task failures. Each execution
    carries a fresh token, so a retried insert whose first commit did happen (its reply
    lost with the connection) is not counted twice: one row is one run of the task code.
    """

    def __init__(self, app: App) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        table = sql.Identifier(app.schema, "executions")
        # The no-op update returns the row a lost-reply attempt already wrote.
        self._insert = sql.SQL(
            "INSERT INTO {} (token, job_id, attempt, worker_id, pid)"
            " VALUES (%s, %s, %s, %s, %s)"
            " ON CONFLICT (token) DO UPDATE SET token = EXCLUDED.token RETURNING id"
        ).format(table)
        self._insert_finished = sql.SQL(
            "INSERT INTO {} (token, job_id, attempt, worker_id, pid, finished)"
            " VALUES (%s, %s, %s, %s, %s, clock_timestamp())"
            " ON CONFLICT (token) DO UPDATE SET token = EXCLUDED.token RETURNING id"
        ).format(table)
        self._finish = sql.SQL(
            "UPDATE {} SET finished = clock_timestamp() WHERE id = %s RETURNING id"
        ).format(table)

    def _execute(self, query: sql.Composed, params: tuple[Any, ...]) -> int:
        deadline = time.monotonic() + RECORD_RETRY_SECONDS
        with self._lock:
            while True:
                try:
                    if self._conn is None or self._conn.closed:
                        # The server itself (the session DSN) when the app's dsn is a
                        # pooler: the records are the tests' own, not pgtasks' traffic.
                        database = self.app.database
                        self._conn = database.connect(
                            session=database.has_session, connect_timeout=2
                        )
                    row = self._conn.execute(query, params).fetchone()
                    assert row is not None
                    return int(row[0])
                except psycopg.OperationalError:
                    conn, self._conn = self._conn, None
                    if conn is not None:
                        conn.close()
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)

    def _key(self, context: JobContext) -> tuple[Any, ...]:
        return (uuid.uuid4(), context.job_id, context.attempt, context.worker_id, os.getpid())

    def started(self, context: JobContext) -> int:
        return self._execute(self._insert, self._key(context))

    def started_lease(self, job_id: int, attempt: int, worker_id: int) -> int:
        """``started`` of a job run without a JobContext (a batch task's job)."""
        return self._execute(self._insert, (uuid.uuid4(), job_id, attempt, worker_id, os.getpid()))

    def finished(self, execution_id: int) -> None:
        self._execute(self._finish, (execution_id,))

    def instant(self, context: JobContext) -> None:
        self._execute(self._insert_finished, self._key(context))


@dataclasses.dataclass(frozen=True)
class Tasks:
    noop: Any
    sleep: Any
    wait_for_file: Any


def register_tasks(app: App) -> Tasks:
    """Register this module's tasks on ``app`` under fixed names (``worker_app.*``)."""
    recorder = Recorder(app)

    @app.task(bind=True, name="worker_app.noop")
    def noop(context: JobContext) -> None:
        recorder.instant(context)

    @app.task(bind=True, name="worker_app.sleep")
    def sleep(context: JobContext, seconds: float, retry_seconds: float | None = None) -> float:
        """Sleep ``seconds`` (``retry_seconds`` on attempts after the first, when given)."""
        execution_id = recorder.started(context)
        if context.attempt > 1 and retry_seconds is not None:
            seconds = retry_seconds
        time.sleep(seconds)
        recorder.finished(execution_id)
        return seconds

    @app.task(bind=True, name="worker_app.wait_for_file")
    def wait_for_file(context: JobContext, path: str, timeout: float = 30.0) -> str:
        """Block until ``path`` exists (the test creates it to let the job finish)."""
        execution_id = recorder.started(context)
        deadline = time.monotonic() + timeout
        while not Path(path).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} did not appear within {timeout} s")
            time.sleep(0.02)
        recorder.finished(execution_id)
        return path

    return Tasks(noop=noop, sleep=sleep, wait_for_file=wait_for_file)


def build_app() -> App:
    """The app of a worker process, from PGTASKS_DSN and PGTASKS_TEST_SCHEMA."""
    app = environment_app(
        connect_timeout=float(os.environ.get("PGTASKS_TEST_CONNECT_TIMEOUT", "3")),
        lease_timeout=2.0,
        heartbeat_interval=0.3,
        rescue_interval=0.3,
        poll_interval=0.2,
    )
    register_tasks(app)
    return app


#: ``app`` is built on first access, so importing this module needs no environment.
__getattr__ = lazy_app(build_app, __name__)
