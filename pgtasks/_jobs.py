"""Job values: what is inserted (JobSpec), what is read back (JobRow), statuses (what a
running attempt sees, JobContext: _job_context.py).

Pure module: no I/O, no database imports.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple, overload

from ._job_context import (
    Attempt as Attempt,
)
from ._job_context import (
    JobContext as JobContext,
)
from ._payload import replace_unreadable
from ._progress import (  # re-exported: their home was this module
    Progress,
    _parse_time,
)
from ._progress import check_meta_patch as check_meta_patch
from ._progress import progress_patch as progress_patch

#: Where a task runs in the worker (see docs/howto/executors.md).
ExecutorName = Literal["thread", "process", "async"]
EXECUTOR_NAMES: tuple[ExecutorName, ...] = ("thread", "process", "async")


class JobStatus(str, enum.Enum):
    """The life cycle of a job (see docs/explanation/state-machine.md)."""

    #: A workflow step waiting for its predecessors (never claimed until they are done).
    WAITING = "waiting"
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
    #: The job's meta as JSON text (an object), or None for none.
    meta_json: str | None = None
    #: Names of the concurrency and rate limits that apply (sorted; None: no limit), and
    #: the concurrency key of a per-key limit (see docs/howto/flow-control.md).
    limit_groups: tuple[str, ...] | None = None
    limit_key: str | None = None


_new_object = object.__new__
_set_attribute = object.__setattr__


def new_job_spec(
    task_name: str,
    queue: str,
    priority: int,
    args_json: str,
    kwargs_json: str,
    max_attempts: int,
    run_at: datetime | None,
    delay_seconds: float | None,
    idempotency_key: str | None,
    meta_json: str | None,
    limit_groups: tuple[str, ...] | None,
    limit_key: str | None,
) -> JobSpec:
    """``JobSpec(...)`` of these (already validated) fields, built at about half the cost:
    the frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``,
    which every enqueue paid twelve times. The result is an ordinary JobSpec (equal,
    hashable, ``dataclasses.replace``-able)."""
    spec: JobSpec = _new_object(JobSpec)
    _set_attribute(
        spec,
        "__dict__",
        {
            "task_name": task_name,
            "queue": queue,
            "priority": priority,
            "args_json": args_json,
            "kwargs_json": kwargs_json,
            "max_attempts": max_attempts,
            "run_at": run_at,
            "delay_seconds": delay_seconds,
            "idempotency_key": idempotency_key,
            "meta_json": meta_json,
            "limit_groups": limit_groups,
            "limit_key": limit_key,
        },
    )
    return spec


def spec_of(fields: dict[str, Any]) -> JobSpec:
    """A JobSpec of these fields (a copy of another spec's ``__dict__`` with some of its
    fields changed, every field present), without the dataclass's ``__init__``."""
    spec: JobSpec = _new_object(JobSpec)
    _set_attribute(spec, "__dict__", fields)
    return spec


class JobBatch(Sequence[JobSpec]):
    """The jobs of ``delay_many``: one task's, alike in every field but their arguments
    (no idempotency key, uniqueness scope, limits or time to run at).

    ``shared`` holds the common fields and ``arguments`` each job's (args, kwargs) JSON
    texts: the batch is inserted by one statement that takes the shared fields once and
    the arguments as two JSON arrays (insert_batch_jobs). Read as a sequence, it is the
    jobs' JobSpecs (built when first read), for every other path.
    """

    def __init__(self, shared: JobSpec, arguments: list[tuple[str, str]]) -> None:
        self.shared = shared
        self.arguments = arguments
        self._specs: list[JobSpec] | None = None

    def __len__(self) -> int:
        return len(self.arguments)

    def _built(self) -> list[JobSpec]:
        if self._specs is None:
            fields = self.shared.__dict__
            specs = []
            for args_json, kwargs_json in self.arguments:
                copy = fields.copy()
                copy["args_json"], copy["kwargs_json"] = args_json, kwargs_json
                specs.append(spec_of(copy))
            self._specs = specs
        return self._specs

    def __iter__(self) -> Iterator[JobSpec]:
        return iter(self._built())

    @overload
    def __getitem__(self, index: int) -> JobSpec: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[JobSpec]: ...

    def __getitem__(self, index: int | slice) -> JobSpec | Sequence[JobSpec]:
        if isinstance(index, slice):
            return JobBatch(self.shared, self.arguments[index])
        return self._built()[index]


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


@dataclasses.dataclass(frozen=True)
class DebouncedJobSpec(JobSpec):
    """A debounced job (docs/howto/flow-control.md, Debounce): while a job of the same
    task and ``debounce_key`` is pending and has never started, an enqueue replaces its
    arguments and pushes its run_at to ``debounce_seconds`` from now, never past
    ``debounce_max_seconds`` after the first enqueue (None: no bound), instead of adding a
    job. Plain jobs are JobSpec, so the plain enqueue paths never look at these fields.
    """

    debounce_key: str = ""
    debounce_seconds: float = 0.0
    debounce_max_seconds: float | None = None


@dataclasses.dataclass(frozen=True)
class StepJob:
    """A workflow step to insert: its job (``spec``: arguments encoded once, ``meta_json``
    from the instrumentation), its place (``step``, e.g. ``"1.0"``), what it receives
    (``input_mode``: None, ``"one"`` or ``"list"``) and its links as positions in the
    workflow's list of steps (the store maps them to the ids it reserved)."""

    spec: JobSpec
    step: str
    input_mode: str | None
    prev: tuple[int, ...]
    next: tuple[int, ...]


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
    #: The job's meta (a JSON object; keys starting with "pgtasks." are pgtasks' own).
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: When its first attempt was claimed (None: never started).
    started_at: datetime | None = None
    #: The attempts that ended with an error (see :class:`AttemptError`), oldest first.
    attempt_errors: list[dict[str, Any]] | None = None
    #: The key of a uniqueness scope (None: no scope), and for ``unique_for=`` the window
    #: of its enqueue, [start, end) (None: unique while active).
    unique_key: str | None = None
    unique_window_start: datetime | None = None
    unique_window_end: datetime | None = None
    #: Why some of its JSON values cannot be decoded (they read as empty); None: all were.
    unreadable: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> JobRow:
        values = {name: row[name] for name in JOB_COLUMNS}
        values["status"] = JobStatus(values["status"])
        for name in OPTIONAL_JOB_COLUMNS:
            if name in row:
                values[name] = row[name]
        values["unreadable"] = replace_unreadable(values)
        if not isinstance(values.get("meta", {}), dict):
            values["meta"] = {}  # a row written by hand; the CHECK constraint forbids it
        return cls(**values)

    @property
    def progress(self) -> Progress | None:
        """The progress the running (or last) attempt reported, or None."""
        return Progress.from_meta(self.meta)

    @property
    def attempts_history(self) -> list[AttemptError]:
        """Every attempt that ended with an error, oldest first."""
        return [AttemptError.from_json(entry) for entry in self.attempt_errors or ()]


#: Columns read when the query has them (get_job, get_jobs); other listings omit them.
OPTIONAL_JOB_COLUMNS = (
    "meta",
    "started_at",
    "attempt_errors",
    "unique_key",
    "unique_window_start",
    "unique_window_end",
)


@dataclasses.dataclass(frozen=True)
class AttemptError:
    """One attempt that ended with an error: which attempt, on which worker, and why."""

    attempt: int | None
    worker_id: int | None
    #: The error text as stored in ``last_error`` (type, message and traceback).
    error: str | None
    #: The exception's qualified class path (e.g. ``builtins.ValueError``) when known.
    exception_type: str | None
    finished_at: datetime | None

    @classmethod
    def from_json(cls, entry: Any) -> AttemptError:
        if not isinstance(entry, dict):
            return cls(None, None, None, None, None)

        def integer(value: Any) -> int | None:
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        def text(value: Any) -> str | None:
            return value if isinstance(value, str) else None

        return cls(
            attempt=integer(entry.get("attempt")),
            worker_id=integer(entry.get("worker_id")),
            error=text(entry.get("error")),
            exception_type=text(entry.get("exception_type")),
            finished_at=_parse_time(entry.get("finished_at")),
        )

    @property
    def summary(self) -> str:
        """One line: the exception and its message, its type named once
        (``RuntimeError: boom``; the last line of a traceback already names it)."""
        lines = [line.strip() for line in (self.error or "").strip().splitlines()]
        last = next((line for line in reversed(lines) if line), "")
        kind = self.exception_type or ""
        short = kind.rsplit(".", 1)[-1]
        if not kind:
            return last or "-"
        if not last:
            return short
        if any(last == name or last.startswith(name + ":") for name in (kind, short)):
            return last
        return f"{short}: {last}"


@dataclasses.dataclass(frozen=True)
class CancelResult:
    """What ``cancel()`` did.

    ``outcome``: ``"cancelled"`` (it was pending and will never run), ``"requested"``
    (it is running: its worker was told, and it will end cancelled), or
    ``"already_finished"`` (done, failed or cancelled before: nothing changed).
    ``terminate``: termination was asked (``cancel(terminate=True)``).
    """

    job_id: int
    outcome: str
    status: JobStatus
    terminate: bool = False

    def __str__(self) -> str:
        if self.outcome == "cancelled":
            return f"job {self.job_id} cancelled"
        if self.outcome == "requested" and self.terminate:
            return f"job {self.job_id} is running: termination requested ({TERMINATE_NOTE})"
        if self.outcome == "requested":
            return f"job {self.job_id} is running: cancellation requested"
        return f"job {self.job_id} already finished ({self.status}): nothing to cancel"

    @classmethod
    def from_row(
        cls, job_id: int, row: Mapping[str, Any], *, terminate: bool = False
    ) -> CancelResult:
        previous = JobStatus(row["previous_status"])
        status = JobStatus(row["status"])
        if previous in (JobStatus.PENDING, JobStatus.WAITING):
            outcome = "cancelled"
        elif previous is JobStatus.RUNNING:
            outcome = "requested"
        else:
            outcome = "already_finished"
        return cls(job_id, outcome, status, terminate)


#: What a termination does per executor (the CLI and the dashboard say it).
TERMINATE_NOTE = (
    "a process-executor job's worker child is killed and replaced, an async job's task is"
    " cancelled; a thread cannot be killed: a thread job only gets the cancel flag"
    " (ctx.cancelled()) and stops when its code checks it"
)
