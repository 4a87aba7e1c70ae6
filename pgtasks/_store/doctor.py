"""DoctorQueries: read-only queries for ``pgtasks doctor`` (``sql/doctor.sql``)."""

from __future__ import annotations

from typing import Any

import psycopg

from .base import QueriesBase, Row


def _deeper_than(depth: int) -> str:
    """A jsonpath that finds an array or object at level ``depth`` (the root is level 0):
    the value nests more than ``depth`` levels deep. Strict: arrays are not unwrapped."""
    return f'strict $.**{{{int(depth)}}} ? (@.type() == "array" || @.type() == "object")'


class DoctorQueries(QueriesBase):
    """Facts about the server and the schema's tables; nothing here writes."""

    def get_oldest_snapshot(self, conn: psycopg.Connection[Any]) -> Row | None:
        rows = self._rows(conn, "get_oldest_snapshot", None)
        return rows[0] if rows else None

    def get_replication_slots(self, conn: psycopg.Connection[Any]) -> list[Row]:
        return self._rows(conn, "get_replication_slots", None)

    def get_prepared_transactions(self, conn: psycopg.Connection[Any]) -> list[Row]:
        return self._rows(conn, "get_prepared_transactions", None)

    def get_table_health(self, conn: psycopg.Connection[Any]) -> list[Row]:
        return self._rows(conn, "get_table_health", {"schema": self.schema})

    def get_index_sizes(self, conn: psycopg.Connection[Any]) -> list[Row]:
        return self._rows(conn, "get_index_sizes", {"schema": self.schema})

    def get_stuck_jobs(self, conn: psycopg.Connection[Any], *, lease_timeout: float) -> Row:
        return self._rows(conn, "get_stuck_jobs", {"lease_timeout": lease_timeout})[0]

    def get_backlog(self, conn: psycopg.Connection[Any]) -> Row:
        return self._rows(conn, "get_backlog", None)[0]

    def get_exhausted_pending_jobs(self, conn: psycopg.Connection[Any]) -> Row:
        return self._rows(conn, "get_exhausted_pending_jobs", None)[0]

    def get_connection_usage(self, conn: psycopg.Connection[Any]) -> Row:
        return self._rows(conn, "get_connection_usage", None)[0]

    def get_isolation(self, conn: psycopg.Connection[Any]) -> Row:
        return self._rows(conn, "get_isolation", None)[0]

    def get_limit_problems(self, conn: psycopg.Connection[Any]) -> Row:
        return self._rows(conn, "get_limit_problems", None)[0]

    def get_unknown_task_jobs(
        self, conn: psycopg.Connection[Any], *, lease_timeout: float
    ) -> list[Row]:
        return self._rows(conn, "get_unknown_task_jobs", {"lease_timeout": lease_timeout})

    def get_deep_payloads(
        self, conn: psycopg.Connection[Any], *, depth: int, decode_depth: int
    ) -> list[Row]:
        """Up to 20 jobs whose payloads nest past ``depth`` levels (those past
        ``decode_depth`` first), each with the total count of such jobs."""
        params = {
            "depth": depth,
            "past": _deeper_than(depth),
            "undecodable": _deeper_than(decode_depth),
        }
        return self._rows(conn, "get_deep_payloads", params)

    def get_deep_history_payloads(
        self, conn: psycopg.Connection[Any], *, depth: int, decode_depth: int, scan: int
    ) -> list[Row]:
        """get_deep_payloads of jobs_history, reading its newest ``scan`` rows only (each
        row found also carries ``scanned``: how many rows were read)."""
        params = {
            "depth": depth,
            "past": _deeper_than(depth),
            "undecodable": _deeper_than(decode_depth),
            "scan": scan,
        }
        return self._rows(conn, "get_deep_history_payloads", params)

    def get_main_module_jobs(self, conn: psycopg.Connection[Any]) -> list[Row]:
        return self._rows(conn, "get_main_module_jobs", None)

    def get_session_defaults(self, conn: psycopg.Connection[Any]) -> Row:
        return self._rows(conn, "get_session_defaults", None)[0]

    def get_wal_position(self, conn: psycopg.Connection[Any]) -> str | None:
        lsn = self._rows(conn, "get_wal_position", None)[0]["lsn"]
        return str(lsn) if lsn is not None else None

    def get_replica_state(self, conn: psycopg.Connection[Any], primary_lsn: str | None) -> Row:
        return self._rows(conn, "get_replica_state", {"primary_lsn": primary_lsn})[0]
