"""Queries: the only module that runs SQL.

Each public method runs one named query from ``sql/*.sql`` (the method's name is
the query's name). Areas with many queries keep them in a mixin of their own
(``_store/<area>.py`` + ``sql/<area>.sql``) that Queries inherits: enqueue (inserts.py),
claims and finishes (claims.py), limits, uniqueness, workflows, operations, the
dashboard's reads, metrics, doctor, counters, paused queues, the migrator's. Statements are
composed once per App with the schema as a ``psycopg.sql.Identifier``.
Producer-facing methods have an ``a``-prefixed async twin; both build their
parameters with the same pure helper, so the logic is written once and the twins
only differ in how they await the driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from .._jobs import JobRow, JobStatus
from ..sql import Migration
from .base import ADVISORY_LOCK_CLASS_BEAT as ADVISORY_LOCK_CLASS_BEAT
from .base import ADVISORY_LOCK_CLASS_MIGRATE as ADVISORY_LOCK_CLASS_MIGRATE
from .base import QueriesBase, Row
from .base import notification_channel as notification_channel
from .claims import ClaimQueries
from .controls import ControlQueries
from .doctor import DoctorQueries
from .durable import DurableQueries
from .history import HistoryQueries
from .identity import IdentityQueries
from .inserts import InsertQueries
from .keyed import KeyedQueries
from .metrics import MetricsQueries
from .migrations import MigrationQueries
from .operations import OperationsQueries
from .queues import QueueQueries
from .web import WebQueries
from .workflows import WorkflowQueries


class Queries(
    InsertQueries,
    ClaimQueries,
    ControlQueries,
    KeyedQueries,
    DoctorQueries,
    DurableQueries,
    HistoryQueries,
    MetricsQueries,
    MigrationQueries,
    OperationsQueries,
    QueueQueries,
    IdentityQueries,
    WebQueries,
    WorkflowQueries,
    QueriesBase,
):
    """Every named query pgtasks runs, one method each."""

    # -- migrations --
    def create_migrations_table(self, conn: psycopg.Connection[Any]) -> None:
        self._rows(conn, "create_migrations_table", None)

    def get_applied_migrations(self, conn: psycopg.Connection[Any]) -> set[int]:
        return {row["version"] for row in self._rows(conn, "get_applied_migrations", None)}

    def record_migration(self, conn: psycopg.Connection[Any], migration: Migration) -> None:
        params = {"version": migration.version, "name": migration.name}
        self._rows(conn, "record_migration", params)

    # -- transaction blocks through a pooler (Database.pin_isolation) --
    def begin_read_committed_block(self, conn: psycopg.Connection[Any]) -> None:
        """Begin a transaction block, READ COMMITTED whatever the server's default (on an
        autocommit connection; a pipelined round trip sends the same statement)."""
        self._rows(conn, "begin_read_committed_block", None)

    def commit_block(self, conn: psycopg.Connection[Any]) -> None:
        self._rows(conn, "commit_block", None)

    def get_schema_version(self, conn: psycopg.Connection[Any]) -> int:
        return int(self._rows(conn, "get_schema_version", None)[0]["version"])

    async def aget_schema_version(self, conn: psycopg.AsyncConnection[Any]) -> int:
        return int((await self._arows(conn, "get_schema_version", None))[0]["version"])

    def update_job_meta(
        self,
        conn: psycopg.Connection[Any],
        *,
        job_id: int,
        worker_id: int,
        attempt: int,
        patch_json: str,
    ) -> bool:
        """Merge a JSON object into a running job's meta; False when the lease is lost."""
        params = {"id": job_id, "worker_id": worker_id, "attempt": attempt, "patch": patch_json}
        return bool(self._rows(conn, "update_job_meta", params))

    # -- reading jobs --
    def get_job_id_by_key(self, conn: psycopg.Connection[Any], key: str) -> int | None:
        """The id of the job whose idempotency key is ``key`` (None: no such job)."""
        rows = self._rows(conn, "get_job_id_by_key", {"key": key})
        return int(rows[0]["id"]) if rows else None

    def get_job(self, conn: psycopg.Connection[Any], job_id: int) -> JobRow | None:
        rows = self._rows(conn, "get_job", {"id": job_id})
        return JobRow.from_row(rows[0]) if rows else None

    async def aget_job(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> JobRow | None:
        rows = await self._arows(conn, "get_job", {"id": job_id})
        return JobRow.from_row(rows[0]) if rows else None

    def get_jobs(self, conn: psycopg.Connection[Any], job_ids: Sequence[int]) -> list[JobRow]:
        rows = self._rows(conn, "get_jobs", {"ids": list(job_ids)})
        return [JobRow.from_row(row) for row in rows]

    async def aget_jobs(
        self, conn: psycopg.AsyncConnection[Any], job_ids: Sequence[int]
    ) -> list[JobRow]:
        rows = await self._arows(conn, "get_jobs", {"ids": list(job_ids)})
        return [JobRow.from_row(row) for row in rows]

    def get_job_status(self, conn: psycopg.Connection[Any], job_id: int) -> JobStatus | None:
        rows = self._rows(conn, "get_job_status", {"id": job_id})
        return JobStatus(rows[0]["status"]) if rows else None

    async def aget_job_status(
        self, conn: psycopg.AsyncConnection[Any], job_id: int
    ) -> JobStatus | None:
        rows = await self._arows(conn, "get_job_status", {"id": job_id})
        return JobStatus(rows[0]["status"]) if rows else None

    # -- workers --
    def register_worker(
        self,
        conn: psycopg.Connection[Any],
        *,
        hostname: str,
        pid: int,
        queues: Sequence[str] | None,
        concurrency: int,
        task_names: Sequence[str] | None = None,
    ) -> int:
        """A new registration (its id is the lease owner of the worker's claims);
        ``task_names``: the tasks the worker knows (None: any, as before migration flow_control)."""
        params = {
            "hostname": hostname,
            "pid": pid,
            "queues": list(queues) if queues is not None else None,
            "concurrency": concurrency,
            "task_names": list(task_names) if task_names is not None else None,
        }
        return int(self._rows(conn, "register_worker", params)[0]["id"])

    def heartbeat_worker(self, conn: psycopg.Connection[Any], worker_id: int) -> bool:
        """Refresh the heartbeat; False when the registration is gone."""
        return bool(self._rows(conn, "heartbeat_worker", {"worker_id": worker_id}))

    def deregister_worker(self, conn: psycopg.Connection[Any], worker_id: int) -> None:
        self._rows(conn, "deregister_worker", {"worker_id": worker_id})

    def rescue_jobs(self, conn: psycopg.Connection[Any], *, lease_timeout: float) -> list[Row]:
        return self._rows(conn, "rescue_jobs", {"lease_timeout": lease_timeout})

    def delete_dead_workers(
        self, conn: psycopg.Connection[Any], *, lease_timeout: float
    ) -> list[Row]:
        return self._rows(conn, "delete_dead_workers", {"lease_timeout": lease_timeout})

    def notify_queue(self, conn: psycopg.Connection[Any], queue: str) -> None:
        self._rows(conn, "notify_queue", {"queue": queue})

    def listen(self, conn: psycopg.Connection[Any], *channels: str) -> None:
        """LISTEN on channels (default: enqueues); identifiers composed, never interpolated."""
        for channel in channels or (self.channel,):
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))

    # -- results and cancellation --
    def cancel_job(
        self, conn: psycopg.Connection[Any], job_id: int, *, terminate: bool = False
    ) -> Row | None:
        """``previous_status`` and ``status`` of the job, or None when it does not exist.

        A job that finished while the cancel waited for its row lock left jobs meanwhile
        (for jobs_history): the statement then finds no row, and a second one
        (a new snapshot) finds it finished. ``terminate``: a running attempt is to be
        killed (see cancellations.sql)."""
        params = {"id": job_id, "terminate": terminate}
        rows = self._rows(conn, "cancel_job", params)
        if not rows:
            rows = self._rows(conn, "cancel_job", params)
        return rows[0] if rows else None

    async def acancel_job(
        self, conn: psycopg.AsyncConnection[Any], job_id: int, *, terminate: bool = False
    ) -> Row | None:
        params = {"id": job_id, "terminate": terminate}
        rows = await self._arows(conn, "cancel_job", params)
        if not rows:
            rows = await self._arows(conn, "cancel_job", params)
        return rows[0] if rows else None

    def expire_jobs(self, conn: psycopg.Connection[Any], *, limit: int = 1000) -> list[int]:
        """End up to ``limit`` pending jobs past their start deadline (expires=) cancelled;
        their ids."""
        return [row["id"] for row in self._rows(conn, "expire_jobs", {"limit": limit})]

    def get_cancel_requests(
        self, conn: psycopg.Connection[Any], worker_id: int
    ) -> dict[int, int | None]:
        """Job id -> the attempt a termination was requested for (None: a cancel only, or
        a termination requested under another lease owner)."""
        rows = self._rows(conn, "get_cancel_requests", {"worker_id": worker_id})
        return {row["id"]: _attempt_number(row["terminate_attempt"]) for row in rows}

    def get_job_outcome(self, conn: psycopg.Connection[Any], job_id: int) -> Row | None:
        rows = self._rows(conn, "get_job_outcome", {"id": job_id})
        return rows[0] if rows else None

    async def aget_job_outcome(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> Row | None:
        rows = await self._arows(conn, "get_job_outcome", {"id": job_id})
        return rows[0] if rows else None

    def notify_done(self, conn: psycopg.Connection[Any], job_ids: Sequence[int]) -> None:
        if job_ids:
            self._rows(conn, "notify_done", {"ids": ",".join(str(job_id) for job_id in job_ids)})

    # -- beat (sql/beat.sql) --
    def configure_beat_session(
        self,
        conn: psycopg.Connection[Any],
        *,
        statement_timeout: float,
        lock_timeout: float,
        keepalives_idle: int,
        keepalives_interval: int,
        keepalives_count: int,
    ) -> None:
        """Session settings of beat's connection (timeouts in seconds)."""
        params = {
            "statement_timeout": f"{round(statement_timeout * 1000)}ms",
            "lock_timeout": f"{round(lock_timeout * 1000)}ms",
            "keepalives_idle": str(keepalives_idle),
            "keepalives_interval": str(keepalives_interval),
            "keepalives_count": str(keepalives_count),
        }
        self._rows(conn, "configure_beat_session", params)

    def lock_beat(self, conn: psycopg.Connection[Any]) -> bool:
        """Try to take the schema's beat lock for ``conn``'s session; True when held."""
        rows = self._rows(conn, "lock_beat", self._lock_params(ADVISORY_LOCK_CLASS_BEAT))
        return bool(rows[0]["locked"])

    def unlock_beat(self, conn: psycopg.Connection[Any]) -> bool:
        rows = self._rows(conn, "unlock_beat", self._lock_params(ADVISORY_LOCK_CLASS_BEAT))
        return bool(rows[0]["unlocked"])

    def load_periodic(self, conn: psycopg.Connection[Any], names: Sequence[str]) -> list[Row]:
        """Rows ``name, processed_until, last_tick, last_job_id, now`` for ``names``."""
        return self._rows(conn, "load_periodic", {"name": list(names)})

    def advance_periodic(
        self,
        conn: psycopg.Connection[Any],
        advances: Sequence[tuple[str, datetime, datetime | None, int | None]],
    ) -> None:
        """Record ``(name, processed_until, last_tick, last_job_id)`` per schedule."""
        params: dict[str, Any] = {}
        for index, column in enumerate(("name", "processed_until", "last_tick", "last_job_id")):
            params[column] = [advance[index] for advance in advances]
        self._rows(conn, "advance_periodic", params)

    def list_periodic(self, conn: psycopg.Connection[Any]) -> list[Row]:
        return self._rows(conn, "list_periodic", None)

    def get_database_time(self, conn: psycopg.Connection[Any]) -> datetime:
        now: datetime = self._rows(conn, "get_database_time", None)[0]["now"]
        return now


def _attempt_number(text: str | None) -> int | None:
    """An attempt number read from meta (any text an UPDATE by hand may have written)."""
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
