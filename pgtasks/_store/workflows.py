"""WorkflowQueries: queries for workflows (``sql/workflows.sql``), one method per named
query."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.pq import PipelineStatus

from .._jobs import StepJob
from .base import QueriesBase, Row, T
from .inserts import COPY_MIN_JOBS
from .params import COPY_CHUNK_ROWS, _copy_field

#: First key of the healer lock (a session lock on the healing worker's connection): "pgth".
ADVISORY_LOCK_CLASS_HEAL = 0x70677468


def _ids(joined: str | None) -> list[int]:
    """The ids reserve_job_ids joined by commas (None: none asked for)."""
    return [int(text) for text in joined.split(",")] if joined else []


def _copyable(
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], steps: Sequence[StepJob]
) -> bool:
    """Whether a workflow's jobs go by COPY (copy_workflow_jobs): enough of them, none
    with limits (a column COPY does not write), the connection not in pipeline mode."""
    return (
        len(steps) >= COPY_MIN_JOBS
        and conn.pgconn.pipeline_status == PipelineStatus.OFF
        and all(step.spec.limit_groups is None and step.spec.limit_key is None for step in steps)
    )


def _copy_rows(
    workflow_id: int, ids: Sequence[int], steps: Sequence[StepJob], rows: int = COPY_CHUNK_ROWS
) -> Iterator[str]:
    """The rows of copy_workflow_jobs (COPY's text format, its column order), as
    insert_workflow_jobs writes them, in pieces of ``rows`` lines."""
    if len(ids) != len(steps):
        raise ValueError(f"{len(steps)} workflow steps need as many ids, got {len(ids)}")
    shared: dict[tuple[str, str, int, int, str | None], tuple[str, str]] = {}
    lines: list[str] = []
    for job_id, step in zip(ids, steps, strict=True):
        spec = step.spec
        key = (spec.task_name, spec.queue, spec.priority, spec.max_attempts, step.input_mode)
        found = shared.get(key)
        if found is None:
            found = shared[key] = (
                f"{_copy_field(spec.task_name)}\t{_copy_field(spec.queue)}"
                f"\t{spec.priority:d}\t{spec.max_attempts:d}",
                "\\N" if step.input_mode is None else _copy_field(step.input_mode),
            )
        fields, mode = found
        args, kwargs, meta = spec.args_json, spec.kwargs_json, spec.meta_json
        following = "{" + ",".join([str(ids[i]) for i in step.next]) + "}" if step.next else "\\N"
        previous = "{" + ",".join([str(ids[i]) for i in step.prev]) + "}" if step.prev else "\\N"
        lines.append(
            f"{job_id:d}\t{args if args == '[]' else _copy_field(args)}"
            f"\t{kwargs if kwargs == '{}' else _copy_field(kwargs)}"
            f"\t{'{}' if meta is None else _copy_field(meta)}\t{fields}"
            f"\t{'waiting' if step.prev else 'pending'}\t{workflow_id:d}"
            f"\t{_copy_field(step.step)}\t{following}\t{previous}\t{len(step.prev):d}\t{mode}\n"
        )
        if len(lines) >= rows:
            yield "".join(lines)
            lines = []
    if lines:
        yield "".join(lines)


class WorkflowQueries(QueriesBase):
    """Create, read, cancel, retry and heal workflows (their progress is the triggers')."""

    def insert_workflow(
        self,
        conn: psycopg.Connection[Any],
        *,
        kind: str,
        on_error: str | None,
        shape: str | None = None,
    ) -> int:
        params = {"kind": kind, "on_error": on_error, "shape": shape}
        return int(self._rows(conn, "insert_workflow", params)[0]["id"])

    async def ainsert_workflow(
        self,
        conn: psycopg.AsyncConnection[Any],
        *,
        kind: str,
        on_error: str | None,
        shape: str | None = None,
    ) -> int:
        params = {"kind": kind, "on_error": on_error, "shape": shape}
        return int((await self._arows(conn, "insert_workflow", params))[0]["id"])

    def _reserve_params(self, count: int) -> dict[str, Any]:
        return {"count": count, "jobs_table": sql.Identifier(self.schema).as_string(None) + ".jobs"}

    def reserve_job_ids(self, conn: psycopg.Connection[Any], count: int) -> list[int]:
        """``count`` new job ids (in increasing order)."""
        rows = self._rows(conn, "reserve_job_ids", self._reserve_params(count), tuples=True)
        return _ids(rows[0][0])

    async def areserve_job_ids(self, conn: psycopg.AsyncConnection[Any], count: int) -> list[int]:
        rows = await self._arows(conn, "reserve_job_ids", self._reserve_params(count), tuples=True)
        return _ids(rows[0][0])

    @staticmethod
    def _workflow_jobs_params(
        workflow_id: int, ids: Sequence[int], steps: Sequence[StepJob]
    ) -> dict[str, Any]:
        """The parameters of insert_workflow_jobs: one JSON array per column (texts the
        client joins: nothing per job is adapted), the steps' links (positions in
        ``steps``) as the ids reserved for them (``ids``, in order; null: none)."""
        if len(ids) != len(steps):
            raise ValueError(f"{len(steps)} workflow steps need as many ids, got {len(ids)}")
        specs = [step.spec for step in steps]
        # Concurrency and rate limits: NULL when no step has any.
        limited = any(spec.limit_groups is not None for spec in specs)
        # Meta (trace context) of the steps: NULL when no step has any.
        traced = any(spec.meta_json is not None for spec in specs)
        dumps = json.dumps
        return {
            "workflow_id": workflow_id,
            "id": dumps(list(ids)),
            "task_name": dumps([spec.task_name for spec in specs]),
            "queue": dumps([spec.queue for spec in specs]),
            "priority": dumps([spec.priority for spec in specs]),
            "max_attempts": dumps([spec.max_attempts for spec in specs]),
            "step": dumps([step.step for step in steps]),
            "waiting_for": dumps([len(step.prev) for step in steps]),
            "input_mode": dumps([step.input_mode for step in steps]),
            "args": "[" + ",".join([spec.args_json for spec in specs]) + "]",
            "kwargs": "[" + ",".join([spec.kwargs_json for spec in specs]) + "]",
            "next": dumps([[ids[i] for i in step.next] if step.next else None for step in steps]),
            "prev": dumps([[ids[i] for i in step.prev] if step.prev else None for step in steps]),
            "limit_groups": (dumps([spec.limit_groups for spec in specs]) if limited else None),
            "limit_key": dumps([spec.limit_key for spec in specs]),
            "meta": (
                "[" + ",".join([spec.meta_json or "{}" for spec in specs]) + "]" if traced else None
            ),
        }

    def insert_workflow_jobs(
        self,
        conn: psycopg.Connection[Any],
        *,
        workflow_id: int,
        ids: Sequence[int],
        steps: Sequence[StepJob],
    ) -> None:
        """Insert a workflow's jobs (``steps``) with the ids reserved for them (by COPY
        when there are many and none has limits)."""
        if _copyable(conn, steps):
            self.copy_workflow_jobs(conn, workflow_id=workflow_id, ids=ids, steps=steps)
            return
        params = self._workflow_jobs_params(workflow_id, ids, steps)
        self._rows(conn, "insert_workflow_jobs", params)

    def copy_workflow_jobs(
        self,
        conn: psycopg.Connection[Any],
        *,
        workflow_id: int,
        ids: Sequence[int],
        steps: Sequence[StepJob],
    ) -> None:
        """Write a workflow's jobs by COPY (many, none with limits: see ``_copyable``)."""
        self._copy(conn, "copy_workflow_jobs", _copy_rows(workflow_id, ids, steps))

    async def acopy_workflow_jobs(
        self,
        conn: psycopg.AsyncConnection[Any],
        *,
        workflow_id: int,
        ids: Sequence[int],
        steps: Sequence[StepJob],
    ) -> None:
        await self._acopy(conn, "copy_workflow_jobs", _copy_rows(workflow_id, ids, steps))

    def schedule_workflow_job(
        self,
        conn: psycopg.Connection[Any],
        job_id: int,
        *,
        run_at: datetime | None,
        delay: float | None,
    ) -> None:
        """Make a workflow's first job (pending, inserted in this transaction) due at
        ``run_at``, or ``delay`` seconds after the database's now."""
        self._rows(conn, "schedule_workflow_job", {"id": job_id, "run_at": run_at, "delay": delay})

    async def ainsert_workflow_jobs(
        self,
        conn: psycopg.AsyncConnection[Any],
        *,
        workflow_id: int,
        ids: Sequence[int],
        steps: Sequence[StepJob],
    ) -> None:
        if _copyable(conn, steps):
            await self.acopy_workflow_jobs(conn, workflow_id=workflow_id, ids=ids, steps=steps)
            return
        params = self._workflow_jobs_params(workflow_id, ids, steps)
        await self._arows(conn, "insert_workflow_jobs", params)

    def get_workflow(self, conn: psycopg.Connection[Any], workflow_id: int) -> Row | None:
        rows = self._rows(conn, "get_workflow", {"id": workflow_id})
        return rows[0] if rows else None

    def get_workflow_jobs(
        self, conn: psycopg.Connection[Any], workflow_id: int, *, limit: int | None = None
    ) -> list[Row]:
        """A workflow's jobs by id: the first ``limit`` (None: all)."""
        return self._rows(conn, "get_workflow_jobs", {"id": workflow_id, "limit": limit})

    async def aget_workflow_jobs(
        self, conn: psycopg.AsyncConnection[Any], workflow_id: int
    ) -> list[Row]:
        return await self._arows(conn, "get_workflow_jobs", {"id": workflow_id, "limit": None})

    def count_workflow_jobs(
        self, conn: psycopg.Connection[Any], workflow_id: int
    ) -> dict[str, int]:
        """How many jobs the workflow has in each status."""
        rows = self._rows(conn, "count_workflow_jobs", {"id": workflow_id})
        return {str(row["status"]): int(row["jobs"]) for row in rows}

    def get_job_workflow(self, conn: psycopg.Connection[Any], job_id: int) -> Row | None:
        rows = self._rows(conn, "get_job_workflow", {"id": job_id})
        return rows[0] if rows else None

    def cancel_workflow(self, conn: psycopg.Connection[Any], workflow_id: int) -> list[Row]:
        """Rows ``id, previous_status`` of the jobs cancelled (or flagged, when running)."""
        return self._rows(conn, "cancel_workflow", {"id": workflow_id})

    def prune_workflows(self, conn: psycopg.Connection[Any], *, older_than: float) -> int:
        rows = self._rows(conn, "prune_workflows", {"older_than": older_than})
        return int(rows[0]["deleted"])

    def list_workflows(
        self,
        conn: psycopg.Connection[Any],
        *,
        status: str | None = None,
        workflow_id: int | None = None,
        before: int | None = None,
        limit: int = 50,
        steps_cap: int | None = None,
    ) -> list[Row]:
        """Workflows newest first: ``id, kind, shape, created_at, steps, steps_done,
        started_at, state, finished_at``. Running workflows are found from their partial
        index, failed and cancelled ones from their jobs of that status, done ones by
        probing each workflow (see workflows.sql). ``steps_cap``: read at most that many
        jobs of each workflow, plus one (None: all); a workflow with more has ``steps``
        above the cap (the jobs read), ``steps_done`` of those, and no times."""
        params = {
            "status": status,
            "id": workflow_id,
            "before": before,
            "limit": limit,
            "steps_cap": steps_cap,
        }
        if workflow_id is None and status == "running":
            return self.list_running_workflows(
                conn, before=before, limit=limit, steps_cap=steps_cap
            )
        if workflow_id is None and status in ("failed", "cancelled"):
            return self.list_ended_workflows(
                conn, status=status, before=before, limit=limit, steps_cap=steps_cap
            )
        return self._rows(conn, "list_workflows", params)

    def list_running_workflows(
        self,
        conn: psycopg.Connection[Any],
        *,
        before: int | None = None,
        limit: int = 50,
        steps_cap: int | None = None,
    ) -> list[Row]:
        """list_workflows of the running workflows, found from jobs_workflow_unfinished_idx."""
        params = {"before": before, "limit": limit, "steps_cap": steps_cap}
        return self._rows(conn, "list_running_workflows", params)

    def list_ended_workflows(
        self,
        conn: psycopg.Connection[Any],
        *,
        status: str,
        before: int | None = None,
        limit: int = 50,
        steps_cap: int | None = None,
    ) -> list[Row]:
        """list_workflows of the workflows in state ``status`` ('failed' or 'cancelled'),
        found from their jobs of that status."""
        params = {"status": status, "before": before, "limit": limit, "steps_cap": steps_cap}
        return self._rows(conn, "list_ended_workflows", params)

    def list_workflows_scan(
        self,
        conn: psycopg.Connection[Any],
        *,
        status: str,
        before: int | None = None,
        limit: int = 50,
        scan: int,
        steps_cap: int | None = None,
    ) -> tuple[list[Row], int | None, int]:
        """The workflows in finished state ``status`` (as list_workflows) among those whose
        jobs the newest ``scan`` workflow jobs (below ``before``) are, the oldest workflow
        id reached (older ones were not searched; None: no workflow) and how many jobs
        were read (fewer than ``scan``: every older workflow was searched)."""
        params = {
            "status": status,
            "before": before,
            "limit": limit,
            "scan": scan,
            "steps_cap": steps_cap,
        }
        rows = self._rows(conn, "list_workflows_scan", params)
        floor, scanned = rows[0]["floor"], int(rows[0]["scanned"] or 0)
        return [row for row in rows if row["id"] is not None], floor, scanned

    def count_workflows(self, conn: psycopg.Connection[Any], *, cap: int) -> Row:
        """``total`` and ``running`` workflows, each counted up to ``cap``."""
        return self._rows(conn, "count_workflows", {"cap": cap})[0]

    def get_workflow_steps(
        self,
        conn: psycopg.Connection[Any],
        workflow_id: int,
        make: Callable[[Sequence[Any]], T],
        *,
        max_result: int,
        max_result_bytes: int = 65_536,
        limit: int | None = None,
    ) -> list[T]:
        """A workflow's jobs for its page (the first ``limit`` by id; None: all), results
        cut to ``max_result`` characters (not rendered when stored in over
        ``max_result_bytes``: ``result_size`` says how large), each made by ``make`` from
        the fields of ``WorkflowStep``, in order (``WorkflowStep.from_tuple``) as it is
        read: a page reads thousands, and no row is kept but what ``make`` makes."""
        params = {
            "id": workflow_id,
            "max_result": max_result,
            "max_result_bytes": max_result_bytes,
            "limit": limit,
        }
        return self._made(conn, "get_workflow_steps", params, make)

    def find_stuck_steps(
        self, conn: psycopg.Connection[Any], *, after: int = 0, limit: int
    ) -> list[int]:
        """Ids above ``after`` of waiting steps the healing pass should move on, in order."""
        rows = self._rows(conn, "find_stuck_steps", {"after": after, "limit": limit})
        return [int(row["id"]) for row in rows]

    def heal_step(self, conn: psycopg.Connection[Any], job_id: int) -> str:
        """Heal one step: ``started``, ``cancelled``, ``unhealable``, ``waiting`` or
        ``skipped`` (held by another session, or no longer waiting)."""
        return str(self._rows(conn, "heal_step", {"id": job_id})[0]["outcome"])

    def retry_workflow_step(self, conn: psycopg.Connection[Any], job_id: int) -> Row:
        """Retry a cancelled step that never received its input: ``outcome`` (waiting,
        pending, refused, not_applicable or missing), ``detail``, ``queue``."""
        return self._rows(conn, "retry_workflow_step", {"id": job_id})[0]

    def get_workflow_health(self, conn: psycopg.Connection[Any], *, since: float) -> Row:
        """``stuck`` steps now; ``healed`` and ``tolerated`` incidents of the last ``since``
        seconds; ``unhealable`` steps still waiting."""
        return self._rows(conn, "get_workflow_health", {"since": since})[0]

    def list_workflow_incidents(
        self,
        conn: psycopg.Connection[Any],
        *,
        workflow_id: int | None = None,
        kind: str | None = None,
        limit: int = 50,
    ) -> list[Row]:
        params = {"workflow_id": workflow_id, "kind": kind, "limit": limit}
        return self._rows(conn, "list_workflow_incidents", params)

    def prune_workflow_incidents(self, conn: psycopg.Connection[Any], *, older_than: float) -> int:
        rows = self._rows(conn, "prune_workflow_incidents", {"older_than": older_than})
        return int(rows[0]["deleted"])

    def lock_healer(self, conn: psycopg.Connection[Any]) -> bool:
        """Try to take the schema's healer lock for ``conn``'s session; True when held."""
        rows = self._rows(conn, "lock_healer", self._lock_params(ADVISORY_LOCK_CLASS_HEAL))
        return bool(rows[0]["locked"])

    def unlock_healer(self, conn: psycopg.Connection[Any]) -> bool:
        rows = self._rows(conn, "unlock_healer", self._lock_params(ADVISORY_LOCK_CLASS_HEAL))
        return bool(rows[0]["unlocked"])
