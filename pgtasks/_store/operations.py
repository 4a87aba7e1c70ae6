"""OperationsQueries: queries for ``pgtasks stats|jobs|workers|prune`` and the
Pruner (``sql/operations.sql``), one method per named query.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from .._jobs import JobRow
from .base import QueriesBase, Row

#: First key of the pruner lock (a session lock on the pruning worker's connection); the
#: other classes are in ``_store_base`` ("pgtk" migrate, "pgtb" beat). This one is "pgtp".
ADVISORY_LOCK_CLASS_PRUNE = 0x70677470


class OperationsQueries(QueriesBase):
    """Reads for operators (never SKIP LOCKED) and the batched writes of retry and prune."""

    def get_queue_stats(self, conn: psycopg.Connection[Any]) -> list[Row]:
        """Per queue: counts by status, ``due``, ``oldest_due_age``, ``finished_last_*``."""
        return self._rows(conn, "get_queue_stats", None)

    def list_jobs(
        self,
        conn: psycopg.Connection[Any],
        *,
        status: str | None = None,
        queue: str | None = None,
        task_name: str | None = None,
        workflow_id: int | None = None,
        limit: int = 50,
    ) -> tuple[datetime | None, list[JobRow]]:
        """The database's ``now()`` (None when no job matched) and the newest matching jobs."""
        params = {
            "status": status,
            "queue": queue,
            "task_name": task_name,
            "workflow_id": workflow_id,
            "limit": limit,
        }
        rows = self._rows(conn, "list_jobs", params)
        return (rows[0]["now"] if rows else None), [JobRow.from_row(row) for row in rows]

    def list_workers(self, conn: psycopg.Connection[Any], *, since: float) -> list[Row]:
        """Registered workers and those removed within ``since`` seconds, with running jobs."""
        return self._rows(conn, "list_workers", {"since": since})

    def list_running_jobs(
        self, conn: psycopg.Connection[Any], *, limit: int, chars: int
    ) -> list[Row]:
        """Running jobs and where they run, arguments cut at ``chars`` (see _running.py)."""
        return self._rows(conn, "list_running_jobs", {"limit": limit, "chars": chars})

    def list_recent_worker_jobs(
        self, conn: psycopg.Connection[Any], worker_ids: Sequence[int], *, per_worker: int
    ) -> list[Row]:
        """The last ``per_worker`` finished jobs of each worker (an index probe each)."""
        if not worker_ids:
            return []
        params = {"worker_ids": list(worker_ids), "per_worker": per_worker}
        return self._rows(conn, "list_recent_worker_jobs", params)

    def retry_job(self, conn: psycopg.Connection[Any], job_id: int) -> Row | None:
        """Retry one failed or cancelled job: None when it does not exist; else a row with
        ``previous_status``, ``retried`` (False: it was in another state, or is a workflow
        step that never received its input: ``needs_input``, see retry_workflow_step).
        """
        rows = self._rows(conn, "retry_job", {"id": job_id})
        return rows[0] if rows else None

    def retry_failed_jobs(
        self, conn: psycopg.Connection[Any], *, task_name: str | None, limit: int
    ) -> list[Row]:
        """One batch of ``retry --all-failed``: rows ``id, queue`` now pending."""
        return self._rows(conn, "retry_failed_jobs", {"task_name": task_name, "limit": limit})

    def prune_jobs(
        self,
        conn: psycopg.Connection[Any],
        *,
        statuses: Sequence[str],
        older_than: float,
        limit: int,
    ) -> dict[str, int]:
        """Delete one batch of finished jobs; the number deleted by status."""
        params = {"statuses": list(statuses), "older_than": older_than, "limit": limit}
        return {row["status"]: row["deleted"] for row in self._rows(conn, "prune_jobs", params)}

    def prune_worker_history(self, conn: psycopg.Connection[Any], *, older_than: float) -> int:
        rows = self._rows(conn, "prune_worker_history", {"older_than": older_than})
        return int(rows[0]["deleted"])

    def lock_pruner(self, conn: psycopg.Connection[Any]) -> bool:
        """Try to take the schema's pruner lock for ``conn``'s session; True when held."""
        rows = self._rows(conn, "lock_pruner", self._lock_params(ADVISORY_LOCK_CLASS_PRUNE))
        return bool(rows[0]["locked"])

    def unlock_pruner(self, conn: psycopg.Connection[Any]) -> bool:
        rows = self._rows(conn, "unlock_pruner", self._lock_params(ADVISORY_LOCK_CLASS_PRUNE))
        return bool(rows[0]["unlocked"])

    def count_purgeable_jobs(
        self, conn: psycopg.Connection[Any], *, queue: str | None, task_name: str | None
    ) -> Row:
        """``jobs``, ``max_id`` and ``workflow_jobs``: what ``pgtasks purge`` would delete."""
        params = {"queue": queue, "task_name": task_name}
        return self._rows(conn, "count_purgeable_jobs", params)[0]

    def purge_jobs(
        self,
        conn: psycopg.Connection[Any],
        *,
        queue: str | None,
        task_name: str | None,
        max_id: int,
        limit: int,
    ) -> list[Row]:
        """Delete one batch of pending jobs (``pgtasks purge``): their ids."""
        params = {"queue": queue, "task_name": task_name, "max_id": max_id, "limit": limit}
        return self._rows(conn, "purge_jobs", params)
