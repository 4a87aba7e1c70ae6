"""What a running attempt sees (pure module: no I/O, no database imports): the Attempt
it is, and the JobContext a ``bind=True`` task gets: its job, whether it was cancelled,
its meta and progress, and its durable calls."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ._durable import DurableContext, DurableEngine
from ._progress import check_meta_patch, progress_patch


class Attempt(Protocol):
    """One attempt of a job, as a worker (ClaimedJob) or a process-pool child
    (JobMessage) holds it: its lease is (worker_id, attempt)."""

    @property
    def job_id(self) -> int: ...
    @property
    def task_name(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def worker_id(self) -> int: ...
    @property
    def meta(self) -> Mapping[str, Any]: ...


@dataclasses.dataclass(frozen=True)
class JobContext(DurableContext):
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
    #: The job's meta as claimed (a read-only view: update_meta() writes to the row).
    meta: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: Merges a patch into the job's meta, fenced by this attempt's lease (the executor's).
    _write_meta: Callable[[dict[str, Any]], None] | None = dataclasses.field(
        default=None, repr=False, compare=False
    )
    #: Durable steps, sleeps and waits of this attempt (pgtasks._durable; None: in place).
    _durable: DurableEngine | None = dataclasses.field(default=None, repr=False, compare=False)

    @classmethod
    def direct(
        cls, task_name: str, *, max_attempts: int, queue: str, meta: Mapping[str, Any] | None = None
    ) -> JobContext:
        """The context of a call without a job (``task(...)``, an eager run): attempt 1."""
        return cls(
            job_id=None,
            task_name=task_name,
            attempt=1,
            max_attempts=max_attempts,
            worker_id=None,
            queue=queue,
            meta=meta if meta is not None else {},
        )

    @classmethod
    def of_attempt(
        cls,
        attempt: Attempt,
        *,
        cancelled: Callable[[], bool],
        write_meta: Callable[[dict[str, Any]], None] | None,
        durable: DurableEngine | None = None,
    ) -> JobContext:
        """The context of a running attempt: ``cancelled`` tells whether its cancellation
        was requested, ``write_meta`` writes a meta patch fenced by its lease."""
        return cls(
            job_id=attempt.job_id,
            task_name=attempt.task_name,
            attempt=attempt.attempt,
            max_attempts=attempt.max_attempts,
            worker_id=attempt.worker_id,
            queue=attempt.queue,
            _cancelled=cancelled,
            meta=attempt.meta,
            _write_meta=write_meta,
            _durable=durable,
        )

    def cancelled(self) -> bool:
        """True once ``cancel()`` was called for this job: stop early and return.

        Long-running sync tasks should poll it between units of work; whatever the task
        then returns or raises, the job is recorded as cancelled.
        """
        return self._cancelled is not None and self._cancelled()

    def update_meta(self, values: Mapping[str, Any] | None = None, /, **more: Any) -> None:
        """Merge keys into the job's meta now (one UPDATE, fenced by this attempt's lease).

        Raises LeaseLostError when the attempt no longer holds the job (rescued, finished,
        cancelled), ReservedMetaKeyError for keys starting with ``pgtasks.``. Blocks for a
        round trip: in an ``async def`` task use :meth:`aupdate_meta`.
        """
        patch = dict(values or {})
        patch.update(more)
        self._write(check_meta_patch(patch))

    async def aupdate_meta(self, values: Mapping[str, Any] | None = None, /, **more: Any) -> None:
        """:meth:`update_meta` for ``async def`` tasks (the write runs in a thread)."""
        patch = dict(values or {})
        patch.update(more)
        await self._awrite(check_meta_patch(patch))

    def set_progress(
        self, current: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Record progress (e.g. 40 of 100 items) where ``job.progress`` reads it.

        One fenced UPDATE per call: report every second or so, not every item.
        """
        self._write(progress_patch(current, total, message))

    async def aset_progress(
        self, current: float, total: float | None = None, message: str | None = None
    ) -> None:
        """:meth:`set_progress` for ``async def`` tasks (the write runs in a thread)."""
        await self._awrite(progress_patch(current, total, message))

    def write_meta(self, patch: dict[str, Any]) -> None:
        """Merge an already checked patch (user keys and reserved ones, such as a
        progress report's) into the job's meta in one fenced UPDATE: the Celery front's
        ``update_state`` writes a state and its progress together."""
        self._write(patch)

    def _write(self, patch: dict[str, Any]) -> None:
        if self._write_meta is None:
            return  # called directly (no job): nothing to write to
        self._write_meta(patch)

    async def _awrite(self, patch: dict[str, Any]) -> None:
        if self._write_meta is None:
            return
        await asyncio.to_thread(self._write_meta, patch)
