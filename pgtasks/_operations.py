"""Operations values and their rendering: stats, job and worker listings (durations,
tables, JSON and prune results: _formats.py).

Pure module: no I/O, no database imports. The Store's operations queries return rows;
the functions here turn them into values (``QueueStats``, ``WorkerInfo``, …) and those
into the text tables and JSON documents that ``pgtasks stats|jobs|workers|prune`` print.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from ._counters import every_counter
from ._durable_text import parked_detail, parked_state
from ._formats import (
    DURATION_FORMS as DURATION_FORMS,
)
from ._formats import (
    NEVER as NEVER,
)
from ._formats import (
    PruneResult as PruneResult,
)
from ._formats import (
    _ago,
    _json_default,
    _one_line,
    _timestamp,
)
from ._formats import (
    format_duration as format_duration,
)
from ._formats import (
    format_prune as format_prune,
)
from ._formats import (
    format_table as format_table,
)
from ._formats import (
    parse_duration as parse_duration,
)
from ._formats import (
    retention_seconds as retention_seconds,
)
from ._formats import (
    to_json as to_json,
)
from ._jobs import JobRow, JobStatus
from ._text import printable

#: Job statuses in life-cycle order (table columns, JSON keys).
STATUSES = tuple(status.value for status in JobStatus)
#: Statuses ``pgtasks jobs retry`` accepts.
RETRYABLE = (JobStatus.FAILED.value, JobStatus.CANCELLED.value)


# -- stats ----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class QueueStats:
    """Counts of one queue (or of all queues: ``queue`` is None)."""

    queue: str | None
    #: Workflow steps waiting for their predecessors (not claimable yet).
    waiting: int = 0
    pending: int = 0
    due: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0
    cancelled: int = 0
    #: Seconds the oldest due pending job has waited past its run_at (None: none due).
    oldest_due_age: float | None = None
    finished_last_minute: int = 0
    finished_last_hour: int = 0

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> QueueStats:
        return cls(**{field.name: row[field.name] for field in dataclasses.fields(cls)})

    @property
    def scheduled(self) -> int:
        """Pending jobs whose run_at is still in the future."""
        return self.pending - self.due

    @property
    def total(self) -> int:
        return self.waiting + self.pending + self.running + self.done + self.failed + self.cancelled

    def as_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {status: getattr(self, status) for status in STATUSES}
        document.update(
            due=self.due,
            scheduled=self.scheduled,
            total=self.total,
            oldest_due_age=self.oldest_due_age,
            finished_last_minute=self.finished_last_minute,
            finished_last_hour=self.finished_last_hour,
        )
        return document


def total_stats(queues: Sequence[QueueStats]) -> QueueStats:
    ages = [queue.oldest_due_age for queue in queues if queue.oldest_due_age is not None]
    counts = {
        name: sum(getattr(queue, name) for queue in queues)
        for name in (*STATUSES, "due", "finished_last_minute", "finished_last_hour")
    }
    return QueueStats(None, oldest_due_age=max(ages) if ages else None, **counts)


@dataclasses.dataclass(frozen=True)
class Stats:
    """What ``pgtasks stats`` shows."""

    now: datetime
    queues: list[QueueStats]
    live_workers: int
    #: Registered workers silent past the lease, not yet removed by a rescuer.
    silent_workers: int
    lease_timeout: float
    #: Pending jobs that no live worker would claim (its task is unknown to every live
    #: worker of its queue): rows of get_unknown_task_jobs (task_name, queue, jobs).
    unknown_tasks: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: How often the guarantees were exercised since the schema was created, every
    #: process (pgtasks._counters): name -> total, every name present.
    counters: dict[str, int] = dataclasses.field(default_factory=dict)
    #: Pending jobs parked by a durable call, by queue: {"sleeping": n, "waiting": n, …}.
    parked: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    #: Fair keys and sequences: fair_keys, sequences,
    #: sequence_jobs_waiting, sequences_held.
    flow: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def total(self) -> QueueStats:
        return total_stats(self.queues)

    def as_json(self) -> dict[str, Any]:
        return {
            "now": self.now,
            "queues": {queue.queue: queue.as_json() for queue in self.queues},
            "total": self.total.as_json(),
            "workers": {
                "live": self.live_workers,
                "silent": self.silent_workers,
                "lease_timeout": self.lease_timeout,
            },
            "unknown_tasks": [
                {"task": row["task_name"], "queue": row["queue"], "jobs": int(row["jobs"])}
                for row in self.unknown_tasks
            ],
            "counters": every_counter(self.counters),
            "parked": self.parked,
            "flow": self.flow,
        }


def format_stats(stats: Stats) -> str:
    headers = (
        "QUEUE",
        "WAITING",
        "PENDING",
        "DUE",
        "RUNNING",
        "DONE",
        "FAILED",
        "CANCELLED",
        "OLDEST DUE",
        "FINISHED 1M",
        "FINISHED 1H",
    )

    def row(queue: QueueStats, name: str) -> list[object]:
        return [
            name,
            queue.waiting,
            queue.pending,
            queue.due,
            queue.running,
            queue.done,
            queue.failed,
            queue.cancelled,
            format_duration(queue.oldest_due_age),
            queue.finished_last_minute,
            queue.finished_last_hour,
        ]

    if stats.queues:
        rows = [row(queue, queue.queue or "") for queue in stats.queues]
        rows.append(row(stats.total, "(all)"))
        table = format_table(headers, rows)
    else:
        table = "no jobs"
    workers = f"workers: {stats.live_workers} live"
    if stats.silent_workers:
        workers += f", {stats.silent_workers} silent past the lease (not yet rescued)"
    workers += f" (lease {format_duration(stats.lease_timeout)})"
    for unknown in stats.unknown_tasks:
        workers += (
            f"\n{unknown['jobs']} job(s) of task `{printable(unknown['task_name'])}`"
            f" (queue {printable(unknown['queue'])})"
            " no live worker knows: they wait for a worker whose app registers it"
        )
    legend = (
        "WAITING: workflow steps waiting for earlier steps, sequence jobs for their turn;"
        " DUE: pending and due now; OLDEST DUE: wait of the oldest due job;"
        " FINISHED 1M/1H: done, failed or cancelled in the last minute/hour"
    )
    counters = "guarantees exercised (since the schema was created): " + ", ".join(
        f"{name.replace('_', ' ')} {value}" for name, value in every_counter(stats.counters).items()
    )
    parked = _parked_text(stats.parked)
    lines = [f"at {_timestamp(stats.now)}", table, workers, parked, counters, legend]
    flow = stats.flow
    if any(flow.values()):
        lines.insert(
            4,
            f"fair keys with jobs: {flow.get('fair_keys', 0)}; sequences:"
            f" {flow.get('sequences', 0)} ({flow.get('sequence_jobs_waiting', 0)} jobs"
            f" waiting their turn, {flow.get('sequences_held', 0)} held by a failed job)",
        )
    return "\n".join(lines)


def _parked_text(parked: dict[str, dict[str, int]]) -> str:
    totals: dict[str, int] = {}
    for states in parked.values():
        for state, count in states.items():
            totals[state] = totals.get(state, 0) + count
    listed = ", ".join(f"{count} {state}" for state, count in sorted(totals.items()))
    return "parked (pending, no slot or attempt held): " + (listed or "none")


# -- jobs -----------------------------------------------------------------------------------------
def job_as_json(job: JobRow) -> dict[str, Any]:
    """Every field of a job row."""
    return {field.name: getattr(job, field.name) for field in dataclasses.fields(job)}


def format_jobs(now: datetime | None, jobs: Sequence[JobRow]) -> str:
    if not jobs or now is None:
        return "no jobs"
    headers = ("ID", "TASK", "QUEUE", "STATUS", "ATTEMPTS", "CREATED", "WHEN", "LAST ERROR")
    rows = [
        [
            job.id,
            job.task_name,
            job.queue,
            _status(job),
            f"{job.attempts}/{job.max_attempts}",
            _ago(now, job.created_at),
            _when(now, job),
            _one_line(job.last_error)
            if job.unreadable is None
            else _one_line(f"unreadable: {job.unreadable}", width=80),
        ]
        for job in jobs
    ]
    return format_table(headers, rows)


def _status(job: JobRow) -> str:
    """The status, and a pending job's parked state (sleeping, waiting for an event)."""
    parked = parked_state(job.status.value, job.meta)
    return job.status.value if parked is None else f"{job.status.value} ({parked})"


def _progress_text(job: JobRow) -> str:
    progress = job.progress
    if progress is None:
        return "-"
    text = f"{progress.current:g}" + (
        f" of {progress.total:g}" if progress.total is not None else ""
    )
    if progress.fraction is not None:
        text += f" ({progress.fraction:.0%})"
    return text + (f": {progress.message}" if progress.message else "")


def _when(now: datetime, job: JobRow) -> str:
    """Due (pending), started (running) or ended (finished), relative to ``now``."""
    if job.status is JobStatus.PENDING:
        return f"due {_ago(now, job.run_at)}"
    if job.status is JobStatus.RUNNING:
        return f"started {_ago(now, job.locked_at)}"
    return f"ended {_ago(now, job.finished_at)}"


def _unique_text(job: JobRow, when: Callable[[datetime | None], str]) -> str:
    """A uniqueness scope's key and scope, or "-"."""
    if job.unique_key is None:
        return "-"
    if job.unique_window_start is None:
        return f"{job.unique_key} (while active)"
    return (
        f"{job.unique_key} (for the window {when(job.unique_window_start)}"
        f" to {when(job.unique_window_end)})"
    )


def format_job(
    job: JobRow,
    now: datetime | None = None,
    *,
    extra_fields: Sequence[tuple[str, str]] = (),
) -> str:
    """Every field of one job (``extra_fields`` after them, e.g. its workflow), then the
    failed attempts, one line each, and its last error (with the traceback) in full."""

    def when(value: datetime | None) -> str:
        if value is None:
            return "-"
        return _timestamp(value) + (f" ({_ago(now, value)})" if now is not None else "")

    def encoded(value: object) -> str:
        return json.dumps(value, ensure_ascii=False, default=_json_default)

    fields = [
        ("task", job.task_name),
        ("queue", job.queue),
        ("status", _status(job)),
        *(
            [("parked", parked_detail(job.meta))]
            if parked_state(job.status.value, job.meta)
            else []
        ),
        ("priority", str(job.priority)),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        *([("unreadable", job.unreadable)] if job.unreadable is not None else []),
        ("args", encoded(job.args)),
        ("kwargs", encoded(job.kwargs)),
        ("result", encoded(job.result)),
        ("meta", encoded(job.meta)),
        ("progress", _progress_text(job)),
        ("idempotency key", job.idempotency_key or "-"),
        ("unique key", _unique_text(job, when)),
        ("run at", when(job.run_at)),
        ("created at", when(job.created_at)),
        ("started at", when(job.started_at)),
        ("updated at", when(job.updated_at)),
        ("locked at", when(job.locked_at)),
        ("locked by", f"worker {job.locked_by}" if job.locked_by is not None else "-"),
        ("finished at", when(job.finished_at)),
        *extra_fields,
    ]
    width = max(len(name) for name, _ in fields) + 1
    lines = [f"job {job.id}"]
    lines += [f"  {(name + ':').ljust(width)} {printable(value)}" for name, value in fields]
    history = job.attempts_history
    if history:
        lines.append("failed attempts:")
        for entry in history:
            worker = f"worker {entry.worker_id}" if entry.worker_id is not None else "worker ?"
            lines.append(
                printable(
                    f"  #{entry.attempt} {worker} {when(entry.finished_at)}"
                    f" {_one_line(entry.summary, width=100)}"
                )
            )
    if job.last_error:
        lines.append("last error:")
        error_lines = job.last_error.rstrip().splitlines()
        lines += [f"  {printable(line, multiline=True)}" for line in error_lines]
    else:
        lines.append("last error: -")
    return "\n".join(lines)


# -- workers --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """One worker as ``pgtasks workers`` shows it.

    ``state``: ``live`` (heartbeat within the lease), ``silent`` (registered but past
    the lease: dead, not yet removed by a rescuer), ``stopped`` (deregistered at a
    clean shutdown), ``lost`` (removed by a rescuer after a lease without heartbeat) or
    ``unknown`` (holds running jobs but is in neither table).
    """

    id: int
    state: str
    hostname: str | None
    pid: int | None
    queues: list[str] | None
    concurrency: int | None
    started_at: datetime | None
    heartbeat_at: datetime | None
    heartbeat_age: float | None
    removed_at: datetime | None
    running_job_ids: list[int]

    @classmethod
    def from_row(cls, row: Mapping[str, Any], *, lease_timeout: float) -> WorkerInfo:
        return cls(
            id=row["id"],
            state=worker_state(row, lease_timeout=lease_timeout),
            hostname=row["hostname"],
            pid=row["pid"],
            queues=row["queues"],
            concurrency=row["concurrency"],
            started_at=row["started_at"],
            heartbeat_at=row["heartbeat_at"],
            heartbeat_age=row["heartbeat_age"],
            removed_at=row["removed_at"],
            running_job_ids=list(row["running_job_ids"]),
        )

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def worker_state(row: Mapping[str, Any], *, lease_timeout: float) -> str:
    if row["hostname"] is None:
        return "unknown"
    if row["removed_at"] is None:
        return "live" if row["heartbeat_age"] <= lease_timeout else "silent"
    # A clean stop deregisters within a heartbeat interval (shorter than the lease) of
    # the last heartbeat; a rescuer removes a worker only after a lease of silence.
    return "lost" if row["silence"] >= lease_timeout else "stopped"


def format_workers(now: datetime, workers: Sequence[WorkerInfo]) -> str:
    if not workers:
        return "no workers"
    headers = ("ID", "STATE", "HOST:PID", "QUEUES", "BUSY", "HEARTBEAT", "REMOVED", "RUNNING JOBS")
    rows = [
        [
            worker.id,
            worker.state,
            f"{worker.hostname}:{worker.pid}" if worker.hostname is not None else "-",
            ",".join(worker.queues) if worker.queues else "*",
            f"{len(worker.running_job_ids)}/{worker.concurrency}"
            if worker.concurrency is not None
            else str(len(worker.running_job_ids)),
            _ago(now, worker.heartbeat_at),
            _ago(now, worker.removed_at),
            _job_ids(worker.running_job_ids),
        ]
        for worker in workers
    ]
    return format_table(headers, rows)


def _job_ids(ids: Sequence[int], limit: int = 10) -> str:
    if not ids:
        return "-"
    shown = ", ".join(str(job_id) for job_id in ids[:limit])
    return shown + (f" (+{len(ids) - limit} more)" if len(ids) > limit else "")


# -- the dashboard's overview ---------------------------------------------------------------------
def overview_queues(
    unfinished: Iterable[Mapping[str, Any]], finished: Iterable[Mapping[str, Any]]
) -> list[QueueStats]:
    """QueueStats per queue from rows of get_unfinished_stats and of the finished counts
    (``queue, status, jobs``), sorted by queue name.
    """
    merged: dict[str, dict[str, Any]] = {}
    for row in unfinished:
        merged.setdefault(row["queue"], {}).update(
            waiting=row.get("waiting", 0),
            pending=row["pending"],
            due=row["due"],
            running=row["running"],
            oldest_due_age=row["oldest_due_age"],
        )
    for row in finished:
        counts = merged.setdefault(row["queue"], {})
        counts[row["status"]] = counts.get(row["status"], 0) + int(row["jobs"])
    return [QueueStats(queue, **counts) for queue, counts in sorted(merged.items())]
