"""The app of the failover test and benchmark (``benchmarks/failover.py``): ``pgtasks
worker`` and ``pgtasks beat`` processes run it on a multi-host DSN (PGTASKS_DSN) in the
schema PGTASKS_FAILOVER_SCHEMA.

``failover.work(seconds)`` sleeps, then writes one row per run to ``<schema>.runs``
(job id, attempt, worker id, pid): a row is one run of the task code, whoever ran it.
``failover.tick`` runs every second (``every=1s``, ``catch_up="all"``): its jobs' ticks
show whether beat skipped or doubled one across the failover.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

from pgtasks import App, JobContext

#: Seconds a run keeps retrying its row while no server accepts writes (the failover).
RECORD_RETRY_SECONDS = 60.0
TICK_SCHEDULE = "failover-every-second"


def create_runs_table(conn: psycopg.Connection[Any], schema: str) -> None:
    conn.execute(
        sql.SQL(
            "CREATE TABLE {} (token uuid PRIMARY KEY, job_id bigint NOT NULL,"
            " attempt integer NOT NULL, worker_id bigint NOT NULL, pid integer NOT NULL,"
            " at timestamptz NOT NULL DEFAULT clock_timestamp())"
        ).format(sql.Identifier(schema, "runs"))
    )


class Recorder:
    """One connection per process (the app's multi-host DSN), replaced after a failure;
    a run's row carries a token so a retried insert whose commit did happen counts once."""

    def __init__(self, app: App) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._insert = sql.SQL(
            "INSERT INTO {} (token, job_id, attempt, worker_id, pid) VALUES (%s, %s, %s, %s, %s)"
            " ON CONFLICT (token) DO NOTHING"
        ).format(sql.Identifier(app.schema, "runs"))

    def record(self, context: JobContext) -> None:
        row = (uuid.uuid4(), context.job_id, context.attempt, context.worker_id, os.getpid())
        deadline = time.monotonic() + RECORD_RETRY_SECONDS
        with self._lock:
            while True:
                try:
                    if self._conn is None or self._conn.closed:
                        self._conn = self.app.database.connect(connect_timeout=2)
                    self._conn.execute(self._insert, row)
                    return
                except psycopg.OperationalError:
                    conn, self._conn = self._conn, None
                    if conn is not None:
                        conn.close()
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)


def register(app: App) -> tuple[Any, Any]:
    """The two tasks on ``app`` (also the producers' apps, to enqueue by the same names)."""
    recorder = Recorder(app)

    @app.task(bind=True, name="failover.work")
    def work(context: JobContext, seconds: float = 0.0) -> None:
        time.sleep(seconds)
        recorder.record(context)

    @app.periodic(every=timedelta(seconds=1), name=TICK_SCHEDULE, catch_up="all")
    @app.task(name="failover.tick")
    def tick() -> None:
        return None

    return work, tick


def build() -> App:
    app = App(
        os.environ["PGTASKS_DSN"],
        schema=os.environ["PGTASKS_FAILOVER_SCHEMA"],
        connect_timeout=2.0,
    )
    register(app)
    return app


def __getattr__(name: str) -> Any:
    if name == "app":
        global app
        app = build()
        return app
    raise AttributeError(name)
