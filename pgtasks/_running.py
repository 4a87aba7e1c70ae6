"""What runs where: each worker's running jobs (task, arguments cut and escaped, attempt,
runtime, host) and the last jobs each worker ran, as ``pgtasks workers``, ``pgtasks
inspect active`` and the dashboard's workers page show them.

Pure module: rows in, values and text out (the store reads them: list_running_jobs and
list_recent_worker_jobs in sql/operations.sql).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ._operations import format_duration, format_table
from ._text import printable

#: Characters of a running job's args and kwargs (their JSON) shown at most.
ARGUMENT_CHARS = 200
#: Running jobs read at most (the oldest claims first, per worker).
RUNNING_SHOWN = 500
#: The last jobs listed per worker (read through jobs_history_worker_idx).
LAST_JOBS = 10


def shown_json(text: str | None, length: int | None, limit: int = ARGUMENT_CHARS) -> str:
    """A JSON document's text as shown: control characters escaped, cut at ``limit``
    characters with "…" when longer."""
    text = text or ""
    cut = len(text) > limit or (length is not None and length > len(text))
    return printable(text[:limit]) + ("…" if cut else "")


@dataclasses.dataclass(frozen=True)
class RunningJob:
    """One running attempt and where it runs."""

    id: int
    task_name: str
    queue: str
    worker_id: int | None
    hostname: str | None
    pid: int | None
    attempt: int
    max_attempts: int
    args: str
    kwargs: str
    locked_at: datetime | None
    runtime: float | None
    cancel_requested: bool

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RunningJob:
        return cls(
            id=row["id"],
            task_name=printable(row["task_name"] or ""),
            queue=printable(row["queue"] or ""),
            worker_id=row["locked_by"],
            hostname=None if row["hostname"] is None else printable(row["hostname"]),
            pid=row["pid"],
            attempt=row["attempts"],
            max_attempts=row["max_attempts"],
            args=shown_json(row["args_text"], row["args_length"]),
            kwargs=shown_json(row["kwargs_text"], row["kwargs_length"]),
            locked_at=row["locked_at"],
            runtime=row["runtime"],
            cancel_requested=bool(row["cancel_requested"]),
        )

    def as_json(self) -> dict[str, Any]:
        document = dataclasses.asdict(self)
        document["locked_at"] = None if self.locked_at is None else self.locked_at.isoformat()
        return document


@dataclasses.dataclass(frozen=True)
class FinishedJob:
    """One of a worker's last jobs."""

    id: int
    task_name: str
    status: str
    worker_id: int
    attempt: int
    finished_at: datetime | None
    took: float | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> FinishedJob:
        return cls(
            id=row["id"],
            task_name=printable(row["task_name"] or ""),
            status=row["status"],
            worker_id=row["locked_by"],
            attempt=row["attempts"],
            finished_at=row["finished_at"],
            took=row["took"],
        )


def by_worker(jobs: Sequence[Any]) -> dict[int | None, list[Any]]:
    """Jobs (RunningJob or FinishedJob) grouped by their worker id, in order."""
    grouped: dict[int | None, list[Any]] = {}
    for job in jobs:
        grouped.setdefault(job.worker_id, []).append(job)
    return grouped


def format_running(jobs: Sequence[RunningJob]) -> str:
    """The running jobs as ``pgtasks workers`` prints them below the workers."""
    if not jobs:
        return "no running jobs"
    headers = ("WORKER", "HOST:PID", "JOB", "TASK", "ATTEMPT", "RUNTIME", "ARGS", "KWARGS")
    rows = [
        [
            "-" if job.worker_id is None else job.worker_id,
            f"{job.hostname}:{job.pid}" if job.hostname is not None else "-",
            job.id,
            job.task_name + (" (cancel requested)" if job.cancel_requested else ""),
            f"{job.attempt}/{job.max_attempts}",
            "-" if job.runtime is None else format_duration(max(0.0, job.runtime)),
            job.args,
            job.kwargs,
        ]
        for job in jobs
    ]
    return format_table(headers, rows)
