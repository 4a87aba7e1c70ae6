"""Workflows as operators read them: the values of ``pgtasks workflows list|show`` (and
of the dashboard's workflow views), and their text.

Pure module: no I/O, no database imports. Steps are positions in the workflow as built:
``1`` is the second step of a chain, ``1.0`` the first member of the group (or chord
header) at that step, ``1.1`` a chord's callback; ``on_error`` is the failure handler.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from ._operations import format_table
from ._text import printable

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

#: A workflow's states: running while any job is unfinished, then failed (a job failed),
#: cancelled (a job was cancelled) or done.
WORKFLOW_STATES = ("running", "done", "failed", "cancelled")
#: Kinds of workflow incidents: an error the triggers
#: tolerated (a hand-edited row), a stuck step the healing pass moved on, one it could not.
INCIDENT_KINDS = ("tolerated", "healed", "unhealable")


def step_key(step: str | None) -> tuple[int, tuple[int, ...], str]:
    """Sort steps as numbers (``2`` before ``10``), anything else last."""
    text = step or ""
    parts = text.split(".")
    # isdecimal, not isdigit: int() refuses digits such as "²" (a row edited by hand).
    if all(part.isdecimal() for part in parts):
        return (0, tuple(map(int, parts)), "")
    return (1, (), text)


def _last_line(text: str | None, width: int = 70) -> str:
    lines = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return last if len(last) <= width else last[: width - 1] + "…"


def format_workflow(workflow: Mapping[str, Any]) -> str:
    """The workflow's id, kind and status, then one line per job, indented by depth."""
    finished: datetime | None = workflow.get("finished_at")
    head = f"workflow {workflow['id']} ({workflow['kind']}): {workflow['status']}"
    head += f", created {workflow['created_at'].isoformat(sep=' ', timespec='seconds')}"
    if finished is not None:
        head += f", finished {finished.isoformat(sep=' ', timespec='seconds')}"
    jobs: Sequence[Mapping[str, Any]] = sorted(
        workflow["jobs"], key=lambda job: (step_key(job["workflow_step"]), job["id"])
    )
    lines = [head]
    for job in jobs:
        step = job["workflow_step"] or "?"
        depth = step.count(".") if step_key(step)[0] == 0 else 0
        line = f"{'  ' * (depth + 1)}{step}  {job['task_name']}  job {job['id']}  {job['status']}"
        if job["status"] == "waiting" and job.get("prev_ids"):
            after = ", ".join(str(job_id) for job_id in job["prev_ids"])
            line += f"  (after job {after})"
        if job["status"] in ("failed", "cancelled") and job.get("last_error"):
            line += f"  {_last_line(job['last_error'])}"
        lines.append(printable(line))
    counts: Mapping[str, int] | None = workflow.get("jobs_by_status")
    if counts:
        left = sum(counts.values()) - len(jobs)
        by_status = ", ".join(f"{status} {count:,}" for status, count in counts.items())
        lines.append(f"  … and {left:,} more jobs not shown (all jobs: {by_status})")
    return "\n".join(lines)


def failed_step(jobs: Sequence[Mapping[str, Any]], job_id: int) -> Mapping[str, Any] | None:
    """The failed job behind job ``job_id`` of a workflow (rows with ``id``, ``status``,
    ``prev_ids``, ``finished_at``): the job itself when it failed, else the first of its
    ancestors (through prev_ids) to fail; None when none failed (it was cancelled)."""
    by_id = {job["id"]: job for job in jobs}
    start = by_id.get(job_id)
    if start is None:
        return None
    if start["status"] == "failed":
        return start
    seen: set[int] = set()
    frontier = list(start.get("prev_ids") or [])
    failed: list[Mapping[str, Any]] = []
    while frontier:
        current = frontier.pop()
        if current in seen or current not in by_id:
            continue
        seen.add(current)
        row = by_id[current]
        if row["status"] == "failed":
            failed.append(row)
        frontier.extend(row.get("prev_ids") or [])
    if not failed:
        return None

    def order(row: Mapping[str, Any]) -> tuple[bool, float, int]:
        finished: datetime | None = row.get("finished_at")
        return (finished is None, finished.timestamp() if finished else 0.0, int(row["id"]))

    return min(failed, key=order)


# -- listings ---------------------------------------------------------------------------------
R = TypeVar("R", bound="DataclassInstance")


class _RowRecord:
    """A dataclass read from a row of its fields' names, written to JSON as they are."""

    @classmethod
    def from_row(cls: type[R], row: Mapping[str, Any]) -> R:
        """The record of ``row``; a field with a default may be missing from it."""
        return cls(
            **{
                field.name: row[field.name]
                for field in dataclasses.fields(cls)
                if field.name in row
                or (
                    field.default is dataclasses.MISSING
                    and field.default_factory is dataclasses.MISSING
                )
            }
        )

    def as_json(self: DataclassInstance) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class WorkflowSummary(_RowRecord):
    """One workflow of ``pgtasks workflows list`` (and the dashboard's list).

    ``shape``: the workflow as built, one line (``add → [3 TIMES mul] → total``, with the
    multiplication sign; None for workflows made before migration workflow_progress);
    ``steps``: its jobs but the on_error handler; ``started_at``: when its first job
    started (None: none yet). ``steps_capped``: the list counted a capped number of its
    jobs (``steps_cap``) and it has more: ``steps`` is the number counted, and its times
    are not read (None).
    """

    id: int
    kind: str
    shape: str | None
    steps: int
    steps_done: int
    state: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    steps_capped: bool = False


@dataclasses.dataclass(slots=True)
class WorkflowStep:
    """One job of a workflow as its page (graph) shows it: its step, links (job ids),
    state, attempts, timings, its result as JSON text (cut; ``result_cut``; None when it
    has none, or when it is too large to render: ``result_size``, its stored size in
    bytes, says so) and the last line of its error. (Slots, not frozen: a page reads
    thousands of them.)"""

    id: int
    step: str | None
    task_name: str
    queue: str
    status: str
    attempts: int
    max_attempts: int
    prev_ids: tuple[int, ...]
    next_ids: tuple[int, ...]
    waiting_for: int | None
    created_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    result_text: str | None
    result_cut: bool
    error_line: str | None
    result_size: int = 0

    @classmethod
    def from_tuple(cls, row: Sequence[Any]) -> WorkflowStep:
        """A step from a row whose values are this class's fields, in order (the store's
        get_workflow_steps)."""
        (ident, step, task, queue, status, attempts, max_attempts, prev, following) = row[:9]
        (waiting_for, created_at, started_at, finished_at, result_text, cut, error, size) = row[9:]
        return cls(
            ident,
            step,
            task,
            queue,
            status,
            attempts,
            max_attempts,
            tuple(prev) if prev else (),
            tuple(following) if following else (),
            waiting_for,
            created_at,
            started_at,
            finished_at,
            result_text,
            bool(cut),
            error,
            int(size or 0),
        )

    @property
    def seconds(self) -> float | None:
        """How long it ran, first start to end (None: not both known)."""
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()


@dataclasses.dataclass(frozen=True)
class WorkflowIncident(_RowRecord):
    """Something the workflow machinery met (``INCIDENT_KINDS``), with the job it concerns,
    what happened (``detail``), its SQLSTATE, how often and when."""

    id: int
    kind: str
    workflow_id: int | None
    job_id: int
    step: str | None
    detail: str
    sqlstate: str | None
    occurrences: int
    first_at: datetime
    last_at: datetime


@dataclasses.dataclass(frozen=True)
class WorkflowDetail:
    """A workflow's page: its summary, its jobs (``steps``, in insertion order), the edges
    between them (predecessor id, successor id) and its incidents."""

    summary: WorkflowSummary
    steps: list[WorkflowStep]
    incidents: list[WorkflowIncident]

    @property
    def edges(self) -> list[tuple[int, int]]:
        return [(before, step.id) for step in self.steps for before in step.prev_ids]

    def as_json(self) -> dict[str, Any]:
        steps = []
        for step in self.steps:
            document = dataclasses.asdict(step)
            document["seconds"] = step.seconds
            steps.append(document)
        return {
            **self.summary.as_json(),
            "steps_detail": steps,
            "edges": [list(edge) for edge in self.edges],
            "incidents": [incident.as_json() for incident in self.incidents],
        }


@dataclasses.dataclass
class HealResult:
    """One healing pass: the stuck steps it started (with their input) or cancelled (a
    predecessor failed, was cancelled or is gone), those it could not move on, and those
    it passed over (held by another session, or moved on meanwhile)."""

    started: list[int] = dataclasses.field(default_factory=list)
    cancelled: list[int] = dataclasses.field(default_factory=list)
    unhealable: list[int] = dataclasses.field(default_factory=list)
    skipped: list[int] = dataclasses.field(default_factory=list)

    @property
    def healed(self) -> int:
        return len(self.started) + len(self.cancelled)

    def add(self, job_id: int, outcome: str) -> None:
        {
            "started": self.started,
            "cancelled": self.cancelled,
            "unhealable": self.unhealable,
        }.get(outcome, self.skipped).append(job_id)

    def as_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "healed": self.healed}


def format_heal(result: HealResult) -> str:
    """The summary line of ``pgtasks workflows heal``."""

    def ids(values: Sequence[int]) -> str:
        shown = ", ".join(str(value) for value in values[:20])
        return f" ({shown}{' …' if len(values) > 20 else ''})" if values else ""

    return (
        f"healed {result.healed} stuck step(s): {len(result.started)} started{ids(result.started)},"
        f" {len(result.cancelled)} cancelled{ids(result.cancelled)};"
        f" {len(result.unhealable)} could not be moved on{ids(result.unhealable)}"
    )


def _when(value: datetime | None) -> str:
    return value.isoformat(sep=" ", timespec="seconds") if value is not None else "-"


def format_workflows(workflows: Iterable[WorkflowSummary]) -> str:
    """The table of ``pgtasks workflows list``."""
    rows = [
        (
            workflow.id,
            workflow.shape or workflow.kind,
            (
                f"more than {workflow.steps - 1:,}"
                if workflow.steps_capped
                else f"{workflow.steps_done}/{workflow.steps}"
            ),
            workflow.state,
            _when(workflow.started_at),
            _when(workflow.finished_at),
        )
        for workflow in workflows
    ]
    if not rows:
        return "no workflows"
    return format_table(("ID", "SHAPE", "STEPS DONE", "STATE", "STARTED", "FINISHED"), rows)


def format_incidents(incidents: Iterable[WorkflowIncident]) -> str:
    """One line per incident: when, kind, workflow, job and what happened."""
    lines = [
        printable(
            f"{_when(incident.last_at)}  {incident.kind}  workflow {incident.workflow_id}"
            f"  job {incident.job_id}"
            + (f" (x{incident.occurrences})" if incident.occurrences > 1 else "")
            + f"  {incident.detail}"
        )
        for incident in incidents
    ]
    return "\n".join(lines) if lines else "no incidents"
