"""MetricsQueries: the queries of metrics and of ``pgtasks.testing`` (``sql/metrics.sql``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import psycopg

from .base import QueriesBase


@dataclasses.dataclass(frozen=True)
class QueueDepth:
    """Jobs of one queue at one moment: ``pending`` due now, ``running``, ``waiting``
    (workflow steps waiting for earlier steps), and ``oldest_due_age``: seconds the oldest
    due job has waited since its run_at (None: none due)."""

    queue: str
    pending: int
    running: int
    waiting: int = 0
    oldest_due_age: float | None = None


def _queues_param(queues: Sequence[str] | None) -> dict[str, Any]:
    return {"queues": list(queues) if queues is not None else None}


class MetricsQueries(QueriesBase):
    """Counts for metrics and ``pgtasks.testing`` (never SKIP LOCKED), and test schemas."""

    def limit_statement_time(self, conn: psycopg.Connection[Any], seconds: float) -> None:
        """``statement_timeout`` for the rest of the current transaction."""
        params = {"statement_timeout": f"{max(1, round(seconds * 1000))}ms"}
        self._rows(conn, "limit_statement_time", params)

    def get_queue_depths(
        self, conn: psycopg.Connection[Any], queues: Sequence[str] | None = None
    ) -> list[QueueDepth]:
        """Queues (all, or those named) that have due pending, running or waiting jobs."""
        rows = self._rows(conn, "get_queue_depths", _queues_param(queues))
        return [
            QueueDepth(
                row["queue"],
                int(row["pending"]),
                int(row["running"]),
                int(row["waiting"]),
                None if row["oldest_due_age"] is None else max(0.0, float(row["oldest_due_age"])),
            )
            for row in rows
        ]

    def count_workers(self, conn: psycopg.Connection[Any], lease_timeout: float) -> tuple[int, int]:
        """Registered workers: (live, silent past ``lease_timeout``)."""
        row = self._rows(conn, "count_workers", {"lease": lease_timeout})[0]
        return int(row["live"]), int(row["silent"])

    def count_scheduled_jobs(
        self, conn: psycopg.Connection[Any], queues: Sequence[str] | None = None
    ) -> int:
        rows = self._rows(conn, "count_scheduled_jobs", _queues_param(queues))
        return int(rows[0]["scheduled"])

    def drop_schema(self, conn: psycopg.Connection[Any]) -> None:
        """Drop this store's schema with everything in it (throwaway test schemas only)."""
        self._rows(conn, "drop_schema", None)
