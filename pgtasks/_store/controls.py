"""ControlQueries: queries for operators' runtime controls (``sql/controls.sql``): limits
changed at runtime, actions on pending jobs, the audit of both. One method per named
query; the transactions that combine them are the App's (``_app/controls.py``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg

from .._job_filter import JobFilter
from .base import QueriesBase, Row
from .web import _filter_params

#: The advisory lock class of the runtime-limits trigger's decisions ("pgtl").
ADVISORY_LOCK_CLASS_RUNTIME_LIMITS = 0x7067746C


class ControlQueries(QueriesBase):
    """Change, pause and reset limits at runtime; act on pending jobs; audit both."""

    # -- limits --
    def lock_limit(self, conn: psycopg.Connection[Any], name: str) -> Row | None:
        rows = self._rows(conn, "lock_limit", {"name": name})
        return rows[0] if rows else None

    def write_limit(
        self, conn: psycopg.Connection[Any], name: str, values: dict[str, Any], actor: str
    ) -> Row:
        """Store what applies to ``name`` (values: concurrency, rate_count, rate_period,
        burst, paused, paused_concurrency); the row's ``declared`` says whether the app
        declares it."""
        return self._rows(conn, "write_limit", {"name": name, "actor": actor, **values})[0]

    def reset_declared_limit(self, conn: psycopg.Connection[Any], name: str) -> bool:
        return bool(self._rows(conn, "reset_declared_limit", {"name": name}))

    def delete_runtime_limit(self, conn: psycopg.Connection[Any], name: str) -> bool:
        return bool(self._rows(conn, "delete_runtime_limit", {"name": name})[0]["removed"])

    def stamp_limit_jobs(
        self, conn: psycopg.Connection[Any], name: str, *, task: str | None, queue: str | None
    ) -> int:
        params = {"name": name, "task": task, "queue": queue}
        return int(self._rows(conn, "stamp_limit_jobs", params)[0]["stamped"])

    def unstamp_limit_jobs(self, conn: psycopg.Connection[Any], name: str) -> int:
        return int(self._rows(conn, "unstamp_limit_jobs", {"name": name})[0]["unstamped"])

    def count_runtime_limits(self, conn: psycopg.Connection[Any]) -> int:
        return int(self._rows(conn, "count_runtime_limits", None)[0]["runtime"])

    def lock_runtime_limits(self, conn: psycopg.Connection[Any]) -> None:
        """Wait for the schema's other transactions that decide the runtime-limits trigger
        (held to the end of this transaction): taken before counting the stored limits or
        reading the trigger, so two such decisions never interleave (a limit stored while
        another is removed could leave the trigger off with a limit stored)."""
        self._rows(
            conn, "lock_runtime_limits", self._lock_params(ADVISORY_LOCK_CLASS_RUNTIME_LIMITS)
        )

    def get_runtime_limits_trigger(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether new jobs are stamped with limits the app does not declare."""
        rows = self._rows(conn, "get_runtime_limits_trigger", {"schema": self.schema})
        return bool(rows[0]["enabled"])

    def enable_runtime_limits_trigger(self, conn: psycopg.Connection[Any]) -> None:
        self._rows(conn, "enable_runtime_limits_trigger", None)

    def disable_runtime_limits_trigger(self, conn: psycopg.Connection[Any]) -> None:
        self._rows(conn, "disable_runtime_limits_trigger", None)

    def settle_runtime_limits_trigger(self, conn: psycopg.Connection[Any]) -> bool:
        """Disable the runtime-limits trigger when no limit the app does not declare is
        stored (migration lighter_inserts creates it enabled); True when this call did.

        Under the schema's runtime-limits lock (``lock_runtime_limits``), the trigger is
        disabled first (its lock on jobs), then the limits are counted: a limit stored
        meanwhile keeps it enabled (rolled back). A lock not granted within
        the session's lock_timeout leaves it enabled: correct, only slower."""
        if not self.get_runtime_limits_trigger(conn):
            return False
        try:
            with conn.transaction():
                self.lock_runtime_limits(conn)
                self.disable_runtime_limits_trigger(conn)
                if self.count_runtime_limits(conn):
                    raise psycopg.Rollback()
                return True
        except psycopg.errors.LockNotAvailable:
            return False
        return False

    def notify_limits_changed(self, conn: psycopg.Connection[Any], name: str) -> None:
        self._rows(conn, "notify_limits_changed", {"name": name})

    def count_limits(self, conn: psycopg.Connection[Any]) -> int:
        return int(self._rows(conn, "count_limits", None)[0]["stored"])

    # -- audit --
    def insert_audit(
        self,
        conn: psycopg.Connection[Any],
        *,
        actor: str,
        action: str,
        target: str,
        before: Any,
        after: Any,
    ) -> int:
        params = {
            "actor": actor,
            "action": action,
            "target": target,
            "before": None if before is None else json.dumps(before, default=str),
            "after": None if after is None else json.dumps(after, default=str),
        }
        return int(self._rows(conn, "insert_audit", params)[0]["id"])

    def get_audit(
        self,
        conn: psycopg.Connection[Any],
        *,
        targets: Sequence[str] | None = None,
        prefix: str | None = None,
        limit: int = 50,
    ) -> list[Row]:
        params = {
            "targets": list(targets) if targets is not None else None,
            "prefix": prefix,
            "limit": limit,
        }
        return self._rows(conn, "get_audit", params)

    # -- pending jobs --
    def run_jobs_now(self, conn: psycopg.Connection[Any], ids: Sequence[int]) -> list[Row]:
        """Rows ``id, before, after`` of the pending jobs made due now."""
        return self._rows(conn, "run_jobs_now", {"ids": list(ids)})

    def snooze_jobs(
        self, conn: psycopg.Connection[Any], ids: Sequence[int], seconds: float
    ) -> list[Row]:
        """Rows ``id, before, after`` of the pending jobs pushed back."""
        return self._rows(conn, "snooze_jobs", {"ids": list(ids), "seconds": seconds})

    def lock_pending_job(self, conn: psycopg.Connection[Any], job_id: int) -> Row | None:
        rows = self._rows(conn, "lock_pending_job", {"id": job_id})
        return rows[0] if rows else None

    def edit_job_arguments(
        self,
        conn: psycopg.Connection[Any],
        job_id: int,
        *,
        args_json: str,
        kwargs_json: str,
        limit_groups: list[str] | None,
        limit_key: str | None,
    ) -> bool:
        params = {
            "id": job_id,
            "args": args_json,
            "kwargs": kwargs_json,
            "limit_groups": limit_groups,
            "limit_key": limit_key,
        }
        return bool(self._rows(conn, "edit_job_arguments", params))

    # -- worker pools --
    def set_worker_pool_bounds(
        self, conn: psycopg.Connection[Any], worker_id: int, low: int, high: int
    ) -> None:
        self._rows(conn, "set_worker_pool_bounds", {"id": worker_id, "min": low, "max": high})

    def lock_worker_pool(self, conn: psycopg.Connection[Any], worker_id: int) -> Row | None:
        rows = self._rows(conn, "lock_worker_pool", {"id": worker_id})
        return rows[0] if rows else None

    def want_worker_pool(self, conn: psycopg.Connection[Any], worker_id: int, size: int) -> None:
        self._rows(conn, "want_worker_pool", {"id": worker_id, "size": size})

    def get_worker_pool_wanted(self, conn: psycopg.Connection[Any], worker_id: int) -> int | None:
        rows = self._rows(conn, "get_worker_pool_wanted", {"id": worker_id})
        return int(rows[0]["concurrency_wanted"]) if rows else None

    def applied_worker_pool(self, conn: psycopg.Connection[Any], worker_id: int, size: int) -> None:
        self._rows(conn, "applied_worker_pool", {"id": worker_id, "size": size})

    def get_filtered_scheduled_ids(
        self, conn: psycopg.Connection[Any], job_filter: JobFilter, *, after: int, limit: int
    ) -> list[int]:
        """Ids of pending jobs scheduled later matching the filter, above ``after``."""
        params = {**_filter_params(job_filter), "after": after, "limit": limit}
        return [int(row["id"]) for row in self._rows(conn, "get_filtered_scheduled_ids", params)]
