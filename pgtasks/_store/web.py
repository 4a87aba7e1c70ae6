"""WebQueries: queries for the dashboard (``sql/web.sql``), one method per
named query. Reads never use SKIP LOCKED; the filtered writes run in batches.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

from .._job_filter import JobFilter
from .base import Params, QueriesBase, Row

#: Statuses of jobs that ended: in jobs_history.
FINISHED_STATUSES = frozenset({"done", "failed", "cancelled"})


def _filter_params(job_filter: JobFilter) -> dict[str, Any]:
    return {
        "status": job_filter.status,
        "queue": job_filter.queue,
        "task_name": job_filter.task_name,
        "args": None if job_filter.args is None else json.dumps(job_filter.args),
        "created_from": job_filter.created_from,
        "created_to": job_filter.created_to,
        "due": job_filter.due,
        "workflow_id": job_filter.workflow_id,
        "log": job_filter.log_pattern,
    }


class WebQueries(QueriesBase):
    """What ``pgtasks web`` reads and writes beyond the operations queries."""

    def begin_read_committed(self, conn: psycopg.Connection[Any]) -> None:
        """The current transaction runs READ COMMITTED (its first statement)."""
        self._rows(conn, "begin_read_committed", None)

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

    def get_finished_minutes(self, conn: psycopg.Connection[Any], *, cap: int) -> list[Row]:
        """Rows ``queue, status, minute, jobs`` of the last hour's finished jobs, reading at
        most ``cap`` of them, newest first (their ``jobs`` add up to ``cap`` when it was hit).
        """
        return self._rows(conn, "get_finished_minutes", {"cap": cap})

    def list_jobs_page(
        self,
        conn: psycopg.Connection[Any],
        job_filter: JobFilter,
        *,
        before: int | None,
        limit: int,
        args_bytes: int,
        args_chars: int,
        error_chars: int,
    ) -> list[Row]:
        """Up to ``limit`` jobs matching the filter with ids below ``before``, newest first,
        as the jobs list shows them (``args_head``: the first ``args_chars`` characters of
        args stored in at most ``args_bytes``, else None; ``error_line``: the last line of
        the last error; ``progress``; ``now``: the database's time)."""
        params: Params = {
            **_filter_params(job_filter),
            "before": before,
            "limit": limit,
            "args_bytes": args_bytes,
            "args_chars": args_chars,
            "error_chars": error_chars,
        }
        if job_filter.workflow_id is not None:  # through the workflow indexes, in any plan
            return self.list_workflow_jobs_page(conn, params)
        # A status filter reads the one place such jobs are.
        if job_filter.status in FINISHED_STATUSES:
            return self.list_finished_jobs_page(conn, params)
        if job_filter.status is not None:
            return self.list_unfinished_jobs_page(conn, params)
        return self._rows(conn, "list_jobs_page", params)

    def list_finished_jobs_page(self, conn: psycopg.Connection[Any], params: Params) -> list[Row]:
        """``list_jobs_page`` for a done, failed or cancelled filter (``params`` as built
        there): jobs_history, and finished jobs an older version left in jobs."""
        return self._rows(conn, "list_finished_jobs_page", params)

    def list_unfinished_jobs_page(self, conn: psycopg.Connection[Any], params: Params) -> list[Row]:
        """``list_jobs_page`` for a waiting, pending or running filter: jobs alone."""
        return self._rows(conn, "list_unfinished_jobs_page", params)

    def list_workflow_jobs_page(self, conn: psycopg.Connection[Any], params: Params) -> list[Row]:
        """list_jobs_page of a filter naming a workflow (``params``: list_jobs_page's, with
        ``workflow_id`` set): read through jobs_workflow_idx and jobs_history_workflow_idx
        whatever else it names."""
        return self._rows(conn, "list_workflow_jobs_page", params)

    def list_jobs_scan(
        self,
        conn: psycopg.Connection[Any],
        job_filter: JobFilter,
        *,
        before: int | None,
        limit: int,
        scan: int,
        args_bytes: int,
        args_chars: int,
        error_chars: int,
    ) -> list[Row]:
        """``list_jobs_page`` among the ``scan`` newest jobs below ``before`` only."""
        params: Params = {
            **_filter_params(job_filter),
            "before": before,
            "limit": limit,
            "scan": scan,
            "args_bytes": args_bytes,
            "args_chars": args_chars,
            "error_chars": error_chars,
        }
        return self._rows(conn, "list_jobs_scan", params)

    def get_scan_floor(
        self, conn: psycopg.Connection[Any], *, before: int | None, scan: int
    ) -> tuple[int | None, int]:
        """The lowest id list_jobs_scan reads (None: no job) and how many jobs it reads."""
        row = self._rows(conn, "get_scan_floor", {"before": before, "scan": scan})[0]
        return row["floor"], int(row["scanned"])

    def count_filtered_jobs(
        self, conn: psycopg.Connection[Any], job_filter: JobFilter, *, cap: int
    ) -> Row:
        """``retryable`` and ``cancellable`` jobs matching the filter, each up to ``cap``."""
        params: Params = {**_filter_params(job_filter), "cap": cap}
        return self._rows(conn, "count_filtered_jobs", params)[0]

    def get_job_page(
        self,
        conn: psycopg.Connection[Any],
        job_id: int,
        *,
        json_chars: int,
        error_chars: int,
        neighbours: int = 20,
        instances: int = 20,
    ) -> Row | None:
        """One job as the dashboard's job page shows it (None: no such job); a workflow
        step's first ``neighbours`` predecessors and successors (``prev_ids``,
        ``next_ids``) and how many it has (``prev_count``, ``next_count``); its first
        ``instances`` limit instances (``limit_groups``) and how many it has
        (``limit_groups_count``)."""
        params: Params = {
            "id": job_id,
            "json_chars": json_chars,
            "error_chars": error_chars,
            "neighbours": neighbours,
            "instances": instances,
        }
        rows = self._rows(conn, "get_job_page", params)
        return rows[0] if rows else None

    def get_limit_instances(self, conn: psycopg.Connection[Any], *, cap: int) -> list[Row]:
        """Rows ``inst, running, pending, due`` per limit instance with jobs: every running
        limited job, the first ``cap`` pending ones in claim order; each row also has
        ``pending_read``, ``overlimited`` and ``first_overlimited`` (among those read;
        one row of NULL ``inst`` when no instance has jobs)."""
        return self._rows(conn, "get_limit_instances", {"cap": cap})

    def get_workflow_neighbours(
        self, conn: psycopg.Connection[Any], workflow_id: int, job_ids: list[int]
    ) -> list[Row]:
        """Rows ``id, workflow_step, task_name, status`` of the jobs ``job_ids`` that are
        in workflow ``workflow_id``, by id."""
        params: Params = {"ids": job_ids, "workflow_id": workflow_id}
        return self._rows(conn, "get_workflow_neighbours", params)

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
