"""RescueQueries: a worker's jobs handed back before they end (``sql/rescues.sql``):
released by a stopping worker or as orphans of a lost reply, rescued from workers whose
lease expired, and those workers' registrations removed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from .._leases import ClaimedJob
from .base import QueriesBase, Row


class RescueQueries(QueriesBase):
    """Release and rescue leases, one method per named query."""

    def rescue_jobs(self, conn: psycopg.Connection[Any], *, lease_timeout: float) -> list[Row]:
        return self._rows(conn, "rescue_jobs", {"lease_timeout": lease_timeout})

    def delete_dead_workers(
        self, conn: psycopg.Connection[Any], *, lease_timeout: float
    ) -> list[Row]:
        return self._rows(conn, "delete_dead_workers", {"lease_timeout": lease_timeout})

    def release_jobs(self, conn: psycopg.Connection[Any], jobs: Sequence[ClaimedJob]) -> set[int]:
        """Give the leases of ``jobs`` back: pending again, without using up the attempt
        (fenced: a lease lost meanwhile is not released). Returns the ids released."""
        by_owner: dict[int, list[ClaimedJob]] = {}
        for job in jobs:
            by_owner.setdefault(job.worker_id, []).append(job)
        released: set[int] = set()
        for owner, held in by_owner.items():
            params = {
                "worker_id": owner,
                "id": [job.id for job in held],
                "attempt": [job.attempt for job in held],
            }
            released.update(row["id"] for row in self._rows(conn, "release_jobs", params))
        return released

    def release_orphaned_batch_jobs(
        self,
        conn: psycopg.Connection[Any],
        *,
        worker_id: int,
        task_names: Sequence[str],
        known_ids: Sequence[int],
    ) -> set[int]:
        """Release the jobs of ``task_names`` held by ``worker_id`` that are not in
        ``known_ids`` (a batch claim whose reply was lost with the connection)."""
        params = {
            "worker_id": worker_id,
            "task_names": list(task_names),
            "known_ids": list(known_ids),
        }
        return {row["id"] for row in self._rows(conn, "release_orphaned_batch_jobs", params)}

    def release_orphaned_jobs(
        self, conn: psycopg.Connection[Any], *, worker_id: int, known_ids: Sequence[int]
    ) -> set[int]:
        """Release the jobs held by ``worker_id`` that are not in ``known_ids`` (claimed by
        a round trip whose reply was lost with the connection)."""
        params = {"worker_id": worker_id, "known_ids": list(known_ids)}
        return {row["id"] for row in self._rows(conn, "release_orphaned_jobs", params)}
