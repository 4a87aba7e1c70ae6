"""Hooks for tracing integrations (pgtasks.contrib.otel): what the core calls, if anything.

Pure module: no I/O. An App has ``instrumentation = None`` unless an integration set one;
every call site checks that attribute first, so an uninstrumented App pays one attribute
read per enqueue and per attempt, nothing more.

- :meth:`Instrumentation.insert` wraps every insert of job rows (``delay``, ``apply_async``,
  ``delay_many``, ``enqueue_many``, transactional enqueues, beat): it may add trace context
  to the specs' meta (reserved keys) and must call ``insert`` exactly once.
- :meth:`Instrumentation.attempt` starts the trace of one attempt where its code runs (a
  job thread, the event loop, a process-pool child); :class:`AttemptTrace` is activated
  around the task's code and ended with the attempt's outcome name (:func:`outcome_name`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from ._jobs import Attempt, InsertedJob, JobSpec
from ._retry import Outcome

#: Outcome names of an attempt's trace (pgtasks.outcome); "released": a stopping worker gave
#: the job back unfinished (the attempt is not used up).
OUTCOME_NAMES = ("done", "retried", "failed", "cancelled", "lease_lost", "released")


def outcome_name(outcome: Outcome, *, written: bool = True, stored: str | None = None) -> str:
    """The trace outcome of an attempt: ``written`` False when its write was fenced out
    (lease lost); ``stored`` is the status the write stored, when known (``cancelled``)."""
    if not written:
        return "lease_lost"
    if stored == "cancelled" or outcome.kind == "cancelled":
        return "cancelled"
    if outcome.kind == "done":
        return "done"
    if outcome.status == "pending":
        return "retried"
    return "failed"


class AttemptTrace(Protocol):
    """The trace of one attempt (a span, for OpenTelemetry)."""

    def activate(self) -> contextlib.AbstractContextManager[None]:
        """Make the attempt's trace current while the task's code runs (this thread or
        coroutine)."""
        ...

    def record_exception(self, error: BaseException) -> None: ...

    def end(self, outcome: str, error: str | None = None) -> None:
        """End the trace with an outcome name (see OUTCOME_NAMES) and the error text."""
        ...

    def log_fields(self) -> Mapping[str, str]:
        """Fields for the worker's log lines about this attempt (e.g. trace_id)."""
        ...


class Instrumentation(Protocol):
    """What an integration provides; see the module docstring."""

    def insert(
        self, specs: Sequence[JobSpec], insert: Callable[[Sequence[JobSpec]], list[InsertedJob]]
    ) -> list[InsertedJob]: ...

    async def ainsert(
        self,
        specs: Sequence[JobSpec],
        insert: Callable[[Sequence[JobSpec]], Awaitable[list[InsertedJob]]],
    ) -> list[InsertedJob]: ...

    def attempt(
        self,
        *,
        job_id: int,
        task_name: str,
        queue: str,
        attempt: int,
        worker_id: int,
        meta: Mapping[str, Any],
    ) -> AttemptTrace | None: ...

    def flush(self) -> None:
        """Export what is buffered (a process-pool child calls it before exiting)."""
        ...


def start_attempt_trace(
    instrumentation: Instrumentation | None, attempt: Attempt
) -> AttemptTrace | None:
    """The attempt's trace when the App is instrumented (None otherwise, or when the
    integration fails: tracing never stops a job)."""
    if instrumentation is None:
        return None
    try:
        return instrumentation.attempt(
            job_id=attempt.job_id,
            task_name=attempt.task_name,
            queue=attempt.queue,
            attempt=attempt.attempt,
            worker_id=attempt.worker_id,
            meta=attempt.meta,
        )
    except Exception:
        logging.getLogger("pgtasks.worker").exception(
            "job %d: starting its trace failed; running it untraced", attempt.job_id
        )
        return None
