"""BeatQueries: the scheduler's statements (``sql/beat.sql``): its session, its leader
lock, the periodic schedules' progress and the database's clock."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from .base import ADVISORY_LOCK_CLASS_BEAT, QueriesBase, Row


class BeatQueries(QueriesBase):
    """What beat runs, one method per named query."""

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
