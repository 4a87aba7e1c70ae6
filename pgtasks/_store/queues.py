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

    def get_paused_queues(self, conn: psycopg.Connection[Any]) -> list[Row]:
        """Rows ``queue, paused_at`` of the paused queues, by name."""
        return self._rows(conn, "get_paused_queues", None)
