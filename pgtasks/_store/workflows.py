"""WorkflowQueries: the Store's queries for workflows (``sql/workflows.sql``, migration
0011), one method per named query."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from .base import Row, StoreBase


class WorkflowQueries(StoreBase):
    """Create, read and cancel workflows (their progress is the migration's trigger)."""

    def insert_workflow(
        self, conn: psycopg.Connection[Any], *, kind: str, on_error: str | None
    ) -> int:
        rows = self._rows(conn, "insert_workflow", {"kind": kind, "on_error": on_error})
        return int(rows[0]["id"])

    async def ainsert_workflow(
        self, conn: psycopg.AsyncConnection[Any], *, kind: str, on_error: str | None
    ) -> int:
        rows = await self._arows(conn, "insert_workflow", {"kind": kind, "on_error": on_error})
        return int(rows[0]["id"])

    def _reserve_params(self, count: int) -> dict[str, Any]:
        return {"count": count, "jobs_table": sql.Identifier(self.schema).as_string(None) + ".jobs"}

    def reserve_job_ids(self, conn: psycopg.Connection[Any], count: int) -> list[int]:
        """``count`` new job ids (in increasing order)."""
        rows = self._rows(conn, "reserve_job_ids", self._reserve_params(count))
        return sorted(int(row["id"]) for row in rows)

    async def areserve_job_ids(self, conn: psycopg.AsyncConnection[Any], count: int) -> list[int]:
        rows = await self._arows(conn, "reserve_job_ids", self._reserve_params(count))
        return sorted(int(row["id"]) for row in rows)

    @staticmethod
    def _workflow_jobs_params(workflow_id: int, jobs: Sequence[dict[str, Any]]) -> dict[str, Any]:
        params: dict[str, Any] = {"workflow_id": workflow_id}
        for column in ("id", "task_name", "queue", "priority", "max_attempts", "step"):
            params[column] = [job[column] for job in jobs]
        params["waiting_for"] = [len(job["prev"]) for job in jobs]
        params["input_mode"] = [job["input_mode"] for job in jobs]
        params["args"] = "[" + ",".join(job["args_json"] for job in jobs) + "]"
        params["kwargs"] = "[" + ",".join(job["kwargs_json"] for job in jobs) + "]"
        params["next"] = json.dumps([job["next"] for job in jobs])
        params["prev"] = json.dumps([job["prev"] for job in jobs])
        # Concurrency and rate limits (migration 0009): NULL when no step has any.
        limited = any(job["limit_groups"] is not None for job in jobs)
        params["limit_groups"] = (
            json.dumps([job["limit_groups"] for job in jobs]) if limited else None
        )
        params["limit_key"] = [job["limit_key"] for job in jobs]
        # Meta (trace context) of the steps, migration 0008: NULL when no step has any.
        metas = [job.get("meta_json") for job in jobs]
        params["meta"] = (
            "[" + ",".join(meta or "{}" for meta in metas) + "]"
            if any(meta is not None for meta in metas)
            else None
        )
        return params

    def insert_workflow_jobs(
        self, conn: psycopg.Connection[Any], *, workflow_id: int, jobs: Sequence[dict[str, Any]]
    ) -> None:
        """Insert a workflow's jobs: dicts with id, task_name, queue, priority, args_json,
        kwargs_json, max_attempts, step, next, prev, input_mode, limit_groups, limit_key
        and optionally meta_json."""
        self._rows(conn, "insert_workflow_jobs", self._workflow_jobs_params(workflow_id, jobs))

    async def ainsert_workflow_jobs(
        self,
        conn: psycopg.AsyncConnection[Any],
        *,
        workflow_id: int,
        jobs: Sequence[dict[str, Any]],
    ) -> None:
        params = self._workflow_jobs_params(workflow_id, jobs)
        await self._arows(conn, "insert_workflow_jobs", params)

    def get_workflow(self, conn: psycopg.Connection[Any], workflow_id: int) -> Row | None:
        rows = self._rows(conn, "get_workflow", {"id": workflow_id})
        return rows[0] if rows else None

    def get_workflow_jobs(self, conn: psycopg.Connection[Any], workflow_id: int) -> list[Row]:
        return self._rows(conn, "get_workflow_jobs", {"id": workflow_id})

    def get_job_workflow(self, conn: psycopg.Connection[Any], job_id: int) -> Row | None:
        rows = self._rows(conn, "get_job_workflow", {"id": job_id})
        return rows[0] if rows else None

    def cancel_workflow(self, conn: psycopg.Connection[Any], workflow_id: int) -> list[Row]:
        """Rows ``id, previous_status`` of the jobs cancelled (or flagged, when running)."""
        return self._rows(conn, "cancel_workflow", {"id": workflow_id})

    def prune_workflows(self, conn: psycopg.Connection[Any], *, older_than: float) -> int:
        rows = self._rows(conn, "prune_workflows", {"older_than": older_than})
        return int(rows[0]["deleted"])
