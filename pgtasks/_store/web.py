"""WebQueries: the Store's queries for the dashboard (``sql/web.sql``), one method per
named query. Reads never use SKIP LOCKED; the filtered writes run in batches.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import psycopg

from .._jobs import JobRow
from .._operations import JobFilter
from .base import Params, Row, StoreBase


def _filter_params(job_filter: JobFilter) -> dict[str, Any]:
    return {
        "status": job_filter.status,
        "queue": job_filter.queue,
        "task_name": job_filter.task_name,
        "args": None if job_filter.args is None else json.dumps(job_filter.args),
        "created_from": job_filter.created_from,
        "created_to": job_filter.created_to,
    }


class WebQueries(StoreBase):
    """What ``pgtasks web`` reads and writes beyond the operations queries."""

    def get_unfinished_stats(self, conn: psycopg.Connection[Any]) -> list[Row]:
        """Per queue: ``pending``, ``due``, ``running``, ``oldest_due_age`` (indexes only)."""
        return self._rows(conn, "get_unfinished_stats", None)

    def get_jobs_table_size(self, conn: psycopg.Connection[Any]) -> float:
        """The planner's row count of the jobs table; -1 before the first ANALYZE."""
        return float(
            self._rows(conn, "get_jobs_table_size", {"schema": self.schema})[0]["reltuples"]
        )

    def get_finished_counts(self, conn: psycopg.Connection[Any]) -> list[Row]:
        """Exact rows ``queue, status, jobs`` of finished jobs (reads all of them)."""
        return self._rows(conn, "get_finished_counts", None)

    def get_finished_estimates(self, conn: psycopg.Connection[Any]) -> list[Row]:
        """Rows ``queue, status, jobs`` estimated from ANALYZE's statistics (reads no job)."""
        return self._rows(conn, "get_finished_estimates", {"schema": self.schema})

    def get_finished_per_minute(self, conn: psycopg.Connection[Any]) -> list[Row]:
        """Rows ``minute, finished`` of the last hour's minutes that finished any job."""
        return self._rows(conn, "get_finished_per_minute", None)

    def list_jobs_page(
        self,
        conn: psycopg.Connection[Any],
        job_filter: JobFilter,
        *,
        before: int | None,
        limit: int,
    ) -> tuple[datetime | None, list[JobRow]]:
        """The database's ``now()`` (None when no job matched) and up to ``limit`` matching
        jobs with ids below ``before``, newest first.
        """
        params: Params = {**_filter_params(job_filter), "before": before, "limit": limit}
        rows = self._rows(conn, "list_jobs_page", params)
        return (rows[0]["now"] if rows else None), [JobRow.from_row(row) for row in rows]

    def delete_finished_job(self, conn: psycopg.Connection[Any], job_id: int) -> Row | None:
        """None when the job does not exist; else ``status``, ``deleted`` and, for a job of a
        workflow, ``workflow_id``, ``workflow_step`` and ``workflow_unfinished`` (then it
        was not deleted)."""
        rows = self._rows(conn, "delete_finished_job", {"id": job_id})
        return rows[0] if rows else None

    def retry_filtered_steps(
        self, conn: psycopg.Connection[Any], job_filter: JobFilter, *, after: int, limit: int
    ) -> list[Row]:
        """One batch of cancelled workflow steps that never received their input, matching
        the filter, ids above ``after``: rows ``id, outcome, detail, queue`` (outcome
        waiting, pending or refused; see ``retry_workflow_step``)."""
        params: Params = {**_filter_params(job_filter), "after": after, "limit": limit}
        return self._rows(conn, "retry_filtered_steps", params)

    def retry_filtered_jobs(
        self, conn: psycopg.Connection[Any], job_filter: JobFilter, *, limit: int
    ) -> list[Row]:
        """One batch: failed or cancelled jobs matching the filter, now pending (``id, queue``)."""
        params: Params = {**_filter_params(job_filter), "limit": limit}
        return self._rows(conn, "retry_filtered_jobs", params)

    def cancel_filtered_jobs(
        self, conn: psycopg.Connection[Any], job_filter: JobFilter, *, limit: int
    ) -> list[Row]:
        """One batch: pending jobs cancelled and running ones flagged (``id, status``)."""
        params: Params = {**_filter_params(job_filter), "limit": limit}
        return self._rows(conn, "cancel_filtered_jobs", params)
