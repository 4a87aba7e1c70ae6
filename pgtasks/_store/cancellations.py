"""CancellationQueries: cancelling a job, its start deadline, and the requests a worker
reads for the jobs it runs (``sql/cancellations.sql``)."""

from __future__ import annotations

from typing import Any

import psycopg

from .base import QueriesBase, Row


class CancellationQueries(QueriesBase):
    """Cancel, expire, and read cancellation requests, one method per named query."""

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


def _attempt_number(text: str | None) -> int | None:
    """An attempt number read from meta (any text an UPDATE by hand may have written)."""
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
