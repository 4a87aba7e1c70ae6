"""KeyedQueries: fair keys and sequences (``sql/keyed.sql``), one method per named
query."""

from __future__ import annotations

from typing import Any

import psycopg

from .base import QueriesBase, Row


class KeyedQueries(QueriesBase):
    """The rescuer's pass over sequences, releasing a held one, and the operators' reads."""

    def sequence_sweep(self, conn: psycopg.Connection[Any]) -> int:
        """Start the next job of every sequence whose turn was missed; how many started."""
        return int(self._rows(conn, "sequence_sweep", None)[0]["moved"])

    def release_sequence_hold(self, conn: psycopg.Connection[Any], key: str) -> int | None:
        """Forget the failed job holding sequence ``key``; its id (None: none held it)."""
        job_id = self._rows(conn, "release_sequence_hold", {"key": key})[0]["job_id"]
        return None if job_id is None else int(job_id)

    def advance_sequence(self, conn: psycopg.Connection[Any], key: str) -> int | None:
        """Start the next waiting job of sequence ``key`` if nothing runs or holds it."""
        started = self._rows(conn, "advance_sequence", {"key": key})[0]["started"]
        return None if started is None else int(started)

    def get_sequences(self, conn: psycopg.Connection[Any], limit: int = 50) -> list[Row]:
        return self._rows(conn, "get_sequences", {"limit": limit})

    def get_sequence_holds(self, conn: psycopg.Connection[Any], limit: int = 50) -> list[Row]:
        return self._rows(conn, "get_sequence_holds", {"limit": limit})

    def get_fair_keys(self, conn: psycopg.Connection[Any], limit: int = 10) -> list[Row]:
        return self._rows(conn, "get_fair_keys", {"limit": limit})

    def count_keyed(self, conn: psycopg.Connection[Any]) -> dict[str, int]:
        """``fair_keys``, ``sequences``, ``sequence_jobs_waiting``, ``sequences_held``."""
        return {
            name: int(value) for name, value in self._rows(conn, "count_keyed", None)[0].items()
        }
