"""Rendering a workflow for ``pgtasks workflows show``: a text tree of its jobs by step.

Pure module: no I/O, no database imports. Steps are positions in the workflow as built:
``1`` is the second step of a chain, ``1.0`` the first member of the group (or chord
header) at that step, ``1.1`` a chord's callback; ``on_error`` is the failure handler.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ._text import printable


def step_key(step: str | None) -> tuple[int, tuple[int, ...], str]:
    """Sort steps as numbers (``2`` before ``10``), anything else last."""
    text = step or ""
    parts = text.split(".")
    if all(part.isdigit() for part in parts):
        return (0, tuple(int(part) for part in parts), "")
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
    return "\n".join(lines)
