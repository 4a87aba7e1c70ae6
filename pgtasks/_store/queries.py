"""Queries: the only module that runs SQL.

Each public method runs one named query from ``sql/*.sql`` (the method's name is
the query's name). Areas with many queries keep them in a mixin of their own
(``_store/<area>.py`` + ``sql/<area>.sql``, a pair per area) that Queries inherits:
enqueue (inserts.py), claims and finishes (claims.py), rescues, cancellations, beat,
limits, uniqueness, workflows, operations, jobs_history, the dashboard's reads, metrics,
doctor, counters, paused queues, the migrator's; Queries itself (``sql/queries.sql``)
reads jobs and keeps the worker registry. Statements are
composed once per App with the schema as a ``psycopg.sql.Identifier``.
Producer-facing methods have an ``a``-prefixed async twin; both build their
parameters with the same pure helper, so the logic is written once and the twins
only differ in how they await the driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from .._jobs import JobRow, JobStatus
from .base import ADVISORY_LOCK_CLASS_BEAT as ADVISORY_LOCK_CLASS_BEAT
from .base import ADVISORY_LOCK_CLASS_MIGRATE as ADVISORY_LOCK_CLASS_MIGRATE
from .base import QueriesBase, Row
from .base import notification_channel as notification_channel
from .beat import BeatQueries
from .cancellations import CancellationQueries
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
from .rescues import RescueQueries
from .web import WebQueries
from .workflows import WorkflowQueries


class Queries(
    InsertQueries,
    ClaimQueries,
    RescueQueries,
    CancellationQueries,
    BeatQueries,
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

    def notify_queue(self, conn: psycopg.Connection[Any], queue: str) -> None:
        self._rows(conn, "notify_queue", {"queue": queue})

    def listen(self, conn: psycopg.Connection[Any], *channels: str) -> None:
        """LISTEN on channels (default: enqueues); identifiers composed, never interpolated."""
        for channel in channels or (self.channel,):
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))

    def get_job_outcome(self, conn: psycopg.Connection[Any], job_id: int) -> Row | None:
        rows = self._rows(conn, "get_job_outcome", {"id": job_id})
        return rows[0] if rows else None

    async def aget_job_outcome(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> Row | None:
        rows = await self._arows(conn, "get_job_outcome", {"id": job_id})
        return rows[0] if rows else None

    def notify_done(self, conn: psycopg.Connection[Any], job_ids: Sequence[int]) -> None:
        if job_ids:
            self._rows(conn, "notify_done", {"ids": ",".join(str(job_id) for job_id in job_ids)})
