"""Job values: what is inserted (JobSpec), what is read back (JobRow), statuses.

Pure module: no I/O, no database imports.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple

#: Where a task runs in the worker (see docs/howto/executors.md).
ExecutorName = Literal["thread", "process", "async"]
EXECUTOR_NAMES: tuple[ExecutorName, ...] = ("thread", "process", "async")


class JobStatus(str, enum.Enum):
    """The life cycle of a job (see docs/explanation/state-machine.md)."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value

    @property
    def is_finished(self) -> bool:
        return self in (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED)


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """A job to insert: arguments already encoded as JSON text.

    Exactly one of ``run_at`` (absolute, aware) and ``delay_seconds`` (relative to the
    database's clock) may be set; with neither, the job is due at the database's now().
    """

    task_name: str
    queue: str
    priority: int
    args_json: str
    kwargs_json: str
    max_attempts: int
    run_at: datetime | None = None
    delay_seconds: float | None = None
    idempotency_key: str | None = None


@dataclasses.dataclass(frozen=True)
class ScopedJobSpec(JobSpec):
    """A job whose key is unique within a scope (docs/howto/flow-control.md, Uniqueness).

    ``unique_key`` is unique among pending and running jobs when ``unique_for`` is None
    (``unique_while="active"``), else among the jobs enqueued in one window of
    ``unique_for`` of the database's clock, aligned to the epoch. ``idempotency_key``
    stays a key for life (beat's tick key); usually None. Plain jobs are JobSpec, so the
    plain enqueue paths never look at these fields.
    """

    unique_key: str = ""
    unique_for: timedelta | None = None


class InsertedJob(NamedTuple):
    """The outcome of inserting one JobSpec (a tuple: built once per job on hot paths)."""

    id: int
    existed: bool


JOB_COLUMNS = (
    "id",
    "task_name",
    "queue",
    "priority",
    "args",
    "kwargs",
    "status",
    "attempts",
    "max_attempts",
    "run_at",
    "locked_at",
    "locked_by",
    "last_error",
    "result",
    "idempotency_key",
    "created_at",
    "updated_at",
    "finished_at",
)


@dataclasses.dataclass(frozen=True)
class JobRow:
    """A snapshot of one row of the jobs table."""

    id: int
    task_name: str
    queue: str
    priority: int
    args: list[Any]
    kwargs: dict[str, Any]
    status: JobStatus
    attempts: int
    max_attempts: int
    run_at: datetime
    locked_at: datetime | None
    locked_by: int | None
    last_error: str | None
    result: Any
    idempotency_key: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> JobRow:
        values = {name: row[name] for name in JOB_COLUMNS}
        values["status"] = JobStatus(values["status"])
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class JobContext:
    """What a ``bind=True`` task receives as its first argument.

    When a bound task is called directly (``task(...)``, not through a worker) the
    job fields are ``None`` and ``attempt`` is 1.
    """

    job_id: int | None
    task_name: str
    attempt: int
    max_attempts: int
    worker_id: int | None
    queue: str
    _cancelled: Callable[[], bool] | None = dataclasses.field(
        default=None, repr=False, compare=False
    )

    def cancelled(self) -> bool:
        """True once ``cancel()`` was called for this job: stop early and return.

        Long-running sync tasks should poll it between units of work; whatever the task
        then returns or raises, the job is recorded as cancelled.
        """
        return self._cancelled is not None and self._cancelled()


@dataclasses.dataclass(frozen=True)
class CancelResult:
    """What ``cancel()`` did.

    ``outcome``: ``"cancelled"`` (it was pending and will never run), ``"requested"``
    (it is running: its worker was told, and it will end cancelled), or
    ``"already_finished"`` (done, failed or cancelled before: nothing changed).
    """

    job_id: int
    outcome: str
    status: JobStatus

    def __str__(self) -> str:
        if self.outcome == "cancelled":
            return f"job {self.job_id} cancelled"
        if self.outcome == "requested":
            return f"job {self.job_id} is running: cancellation requested"
        return f"job {self.job_id} already finished ({self.status}): nothing to cancel"

    @classmethod
    def from_row(cls, job_id: int, row: Mapping[str, Any]) -> CancelResult:
        previous = JobStatus(row["previous_status"])
        status = JobStatus(row["status"])
        if previous is JobStatus.PENDING:
            outcome = "cancelled"
        elif previous is JobStatus.RUNNING:
            outcome = "requested"
        else:
            outcome = "already_finished"
        return cls(job_id, outcome, status)
