"""QueueQueries: queries for paused queues (``sql/queues.sql``), one method per named
query."""

from __future__ import annotations

from typing import Any

import psycopg

from .base import QueriesBase, Row


class QueueQueries(QueriesBase):
    """Pause, resume and read the paused queues."""

    def pause_queue(self, conn: psycopg.Connection[Any], queue: str) -> bool:
        """Pause ``queue``; False when it was paused already."""
        return bool(self._rows(conn, "pause_queue", {"queue": queue})[0]["paused"])

    def resume_queue(self, conn: psycopg.Connection[Any], queue: str) -> bool:
        """Resume ``queue`` (its workers are woken); False when it was not paused."""
        return bool(self._rows(conn, "resume_queue", {"queue": queue})[0]["resumed"])

    def get_paused_queues(
        self, conn: psycopg.Connection[Any], hostname: str | None = None
    ) -> list[Row]:
        """Rows ``queue, paused_at`` of the paused queues, by name; a worker's
        ``hostname``: a row of queue ``""`` too when its host is paused."""
        return self._rows(conn, "get_paused_queues", {"hostname": hostname})

    def pause_host(self, conn: psycopg.Connection[Any], hostname: str) -> bool:
        """Pause the workers of ``hostname``; False when they were paused already."""
        return bool(self._rows(conn, "pause_host", {"hostname": hostname})[0]["paused"])

    def resume_host(self, conn: psycopg.Connection[Any], hostname: str) -> bool:
        """Resume the workers of ``hostname``; False when they were not paused."""
        return bool(self._rows(conn, "resume_host", {"hostname": hostname})[0]["resumed"])

    def get_paused_hosts(self, conn: psycopg.Connection[Any]) -> list[Row]:
        """Rows ``hostname, paused_at`` of the paused hosts."""
        return self._rows(conn, "get_paused_hosts", None)
