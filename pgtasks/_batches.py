"""Batch execution (docs/howto/flow-control.md, "Batches"): ``Batch`` (the task option)
and ``BatchJob`` (what a batch handler receives, one per job).

A task declared with ``batch=Batch(max_size=500, max_wait=timedelta(seconds=1))`` has a
handler that takes one argument: the list of its claimed jobs, each a :class:`BatchJob`
(id, args, kwargs, attempt, max_attempts, queue, meta, worker_id). The handler may decide each job's
outcome: ``job.done(result)``, ``job.retry(delay=None)``, ``job.fail(error)``, or run a
job's part inside ``with job.outcome():`` (an exception there ends that job's attempt as
if a task had raised it: retried per the task's policy, failed at the last attempt).
Jobs the handler leaves undecided are done (result None) when it returns, and end with
its exception when it raises. Each job keeps its own attempts, lease and fenced write.

Pure module: no I/O, no database imports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, Literal

#: The largest batch one claim gathers.
MAX_BATCH_SIZE = 10_000
#: The longest a worker waits to fill a batch.
MAX_BATCH_WAIT = timedelta(minutes=10)


@dataclasses.dataclass(frozen=True)
class Batch:
    """A batch task's option: hand its jobs to the handler up to ``max_size`` at a time,
    waiting up to ``max_wait`` after the first due job for more to fill the batch."""

    max_size: int = 100
    max_wait: timedelta = timedelta(seconds=1)

    def __post_init__(self) -> None:
        size = self.max_size
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_BATCH_SIZE:
            raise ValueError(
                f"Batch(max_size=) must be an int from 1 to {MAX_BATCH_SIZE}, got {size!r}"
            )
        wait = self.max_wait
        if not isinstance(wait, timedelta) or not timedelta(0) <= wait <= MAX_BATCH_WAIT:
            raise ValueError(
                "Batch(max_wait=) must be a timedelta from 0 to 10 minutes, e.g."
                f" timedelta(seconds=1), got {wait!r}"
            )


Decision = Literal["done", "retry", "fail", "error"]


class BatchJob:
    """One job of a batch, as its handler sees it; its decision, once taken, stays."""

    __slots__ = (
        "args",
        "attempt",
        "decision",
        "id",
        "kwargs",
        "max_attempts",
        "meta",
        "queue",
        "value",
        "worker_id",
    )

    def __init__(
        self,
        id: int,
        args: list[Any],
        kwargs: dict[str, Any],
        *,
        attempt: int,
        max_attempts: int,
        queue: str,
        meta: dict[str, Any],
        worker_id: int = 0,
    ) -> None:
        self.id = id
        self.args = args
        self.kwargs = kwargs
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.queue = queue
        self.meta = meta
        #: The lease is (worker_id, attempt): the worker registration that holds the job.
        self.worker_id = worker_id
        #: None until decided; then "done" (value: the result), "retry" (value: the delay
        #: or None for the task's backoff), "fail" (value: the error text) or "error"
        #: (value: the exception, met as a task's exception is).
        self.decision: Decision | None = None
        self.value: Any = None

    def __repr__(self) -> str:
        return f"<BatchJob {self.id} attempt {self.attempt} {self.decision or 'undecided'}>"

    def _decide(self, decision: Decision, value: Any) -> None:
        if self.decision is None:
            self.decision, self.value = decision, value

    def done(self, result: Any = None) -> None:
        """The job succeeded with ``result`` (JSON-serialisable)."""
        self._decide("done", result)

    def retry(self, delay: float | timedelta | None = None) -> None:
        """Run the job again (a new attempt) after ``delay`` (None: the task's backoff);
        at its last attempt it fails instead."""
        if isinstance(delay, timedelta):
            delay = delay.total_seconds()
        if delay is not None and not (math.isfinite(delay) and 0 <= delay <= 1e9):
            raise ValueError(f"retry(delay=) must be from 0 to 1e9 seconds, got {delay!r}")
        self._decide("retry", delay)

    def fail(self, error: str | BaseException) -> None:
        """The job fails for good, whatever attempts it has left."""
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        self._decide("fail", text)

    @contextlib.contextmanager
    def outcome(self) -> Iterator[BatchJob]:
        """Run this job's part inside: an exception ends its attempt as a task's would
        (the handler goes on with the next job); no exception: done, unless decided."""
        try:
            yield self
        except Exception as error:
            self._decide("error", error)
        else:
            self._decide("done", None)
