"""A claimed job (ClaimedJob: its row and lease) and one attempt of it in flight (Running)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from psycopg.rows import RowFactory

from .._jobs import ExecutorName
from .._retry import Outcome

if TYPE_CHECKING:
    from .._app.tasks import Task
    from .._instrumentation import AttemptTrace


@dataclasses.dataclass(frozen=True)
class ClaimedJob:
    """A job as claimed: its lease is (worker_id, attempt)."""

    id: int
    task_name: str
    queue: str
    priority: int
    args: list[Any]
    kwargs: dict[str, Any]
    attempt: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    claimed_at: datetime
    worker_id: int
    #: The job's meta as claimed (a JSON object).
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_row(cls, row: Mapping[str, Any], worker_id: int) -> ClaimedJob:
        return cls(
            id=row["id"],
            task_name=row["task_name"],
            queue=row["queue"],
            priority=row["priority"],
            args=row["args"],
            kwargs=row["kwargs"],
            attempt=row["attempts"],
            max_attempts=row["max_attempts"],
            run_at=row["run_at"],
            created_at=row["created_at"],
            claimed_at=row["claimed_at"],
            worker_id=worker_id,
            meta=row.get("meta") or {},
        )


#: ClaimedJob's fields by the claim's column names (``attempts`` is the attempt).
_CLAIM_FIELDS = {"attempts": "attempt"}


def claimed_jobs(worker_id: int) -> RowFactory[ClaimedJob]:
    """A psycopg row factory that makes claimed rows ClaimedJobs of lease owner
    ``worker_id`` straight from their values (no dict per row, nor the frozen
    dataclass's ``__init__``, which sets each field through ``object.__setattr__``)."""

    def factory(cursor: Any) -> Callable[[Sequence[Any]], ClaimedJob]:
        names = [_CLAIM_FIELDS.get(column.name, column.name) for column in cursor.description or ()]
        missing = _FIELDS.difference(names, ("worker_id",))
        if missing:
            raise RuntimeError(f"the claim returned no {', '.join(sorted(missing))} column")
        new = object.__new__

        def make(values: Sequence[Any]) -> ClaimedJob:
            job: ClaimedJob = new(ClaimedJob)
            fields = job.__dict__
            fields.update(zip(names, values, strict=True))
            fields["worker_id"] = worker_id
            return job

        return make

    return factory


def claim_order(job: ClaimedJob) -> tuple[int, datetime, int]:
    """Sort key of claimed jobs in claim order (priority DESC, run_at, id)."""
    return (-job.priority, job.run_at, job.id)


_FIELDS = frozenset(field.name for field in dataclasses.fields(ClaimedJob))


@dataclasses.dataclass(eq=False)
class Running:
    """One attempt in flight. ``token`` tells apart two attempts of one job id."""

    token: int
    job: ClaimedJob
    task: Task[Any, Any] | None
    started: float
    deadline: float | None
    future: concurrent.futures.Future[Outcome] | None = None
    #: Set when the outcome was decided without the code (timeout); its late end is ignored.
    abandoned: bool = False
    #: Set when cancellation of the job was requested (JobContext.cancelled() reads it).
    cancel_requested: bool = False
    #: Set when the lease fence first refused a write of this attempt (it is counted once).
    lease_lost: bool = False

    def is_cancel_requested(self) -> bool:
        return self.cancel_requested

    #: The asyncio task of an ``async def`` job, to cancel it.
    async_task: asyncio.Task[Outcome] | None = None
    #: Where it runs: "thread", "process", "async" (None: unknown task, no code to run).
    executor: ExecutorName | None = None
    #: The attempt's trace (an instrumented App's thread or async job), ended by the
    #: worker once the outcome is written.
    trace: AttemptTrace | None = None
