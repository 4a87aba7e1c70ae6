"""Celery's task exceptions, on pgtasks' engine (``from pgtasks.celery.exceptions import
Retry, MaxRetriesExceededError, SoftTimeLimitExceeded, Ignore, Reject``).

``Retry`` is pgtasks' own retry request (a subclass), so raising it in any task schedules
the next attempt; ``SoftTimeLimitExceeded`` is the very class pgtasks raises inside a
sync task at its soft time limit.
"""

from __future__ import annotations

import builtins
from datetime import datetime, timedelta, timezone
from typing import Any

from .._errors import JobCancelled, SoftTimeLimitExceeded, TaskFailed, WorkerLostError
from .._retry import Retry as _NativeRetry

__all__ = [
    "CeleryError",
    "Ignore",
    "ImproperlyConfigured",
    "MaxRetriesExceededError",
    "NotRegistered",
    "Reject",
    "Retry",
    "SoftTimeLimitExceeded",
    "TaskError",
    "TaskRevokedError",
    "TimeLimitExceeded",
    "TimeoutError",
    "WorkerLostError",
]


class CeleryError(Exception):
    """Base of the errors this front raises itself."""


class TaskError(CeleryError):
    """A task-related error."""


class ImproperlyConfigured(CeleryError):
    """A setting or option pgtasks cannot honour."""


class NotRegistered(KeyError, TaskError):
    """No task of that name is registered."""


class MaxRetriesExceededError(TaskError):
    """``self.retry()`` was called with no retry left."""

    def __init__(self, *args: Any, task_args: Any = None, task_kwargs: Any = None) -> None:
        super().__init__(*args)
        self.task_args = task_args
        self.task_kwargs = task_kwargs


class Ignore(TaskError):
    """Raised in a task: end it without recording a failure (its job ends done, None)."""


class Reject(TaskError):
    """Raised in a task: ``requeue=True`` runs it again at once, else it fails."""

    def __init__(self, reason: Any = None, requeue: bool = False) -> None:
        super().__init__(reason, requeue)
        self.reason = reason
        self.requeue = requeue


class TimeLimitExceeded(TaskError):
    """The hard time limit passed (the job's attempt timed out)."""


class TaskRevokedError(TaskError):
    """The task was revoked (its job was cancelled, or expired) before it could finish."""


class TimeoutError(CeleryError, builtins.TimeoutError):
    """``AsyncResult.get(timeout=...)`` waited in vain."""


def _delay_of(when: Any) -> float:
    if when is None:
        return 0.0
    if isinstance(when, datetime):
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        return max(0.0, float((when - datetime.now(timezone.utc)).total_seconds()))
    if isinstance(when, timedelta):
        return max(0.0, when.total_seconds())
    return max(0.0, float(when))


class Retry(_NativeRetry):
    """The task is to be retried (``self.retry()`` raises it; raising it works too).

    ``when``: seconds, a timedelta or a datetime (naive: UTC, as Celery reads it).
    """

    def __init__(
        self,
        message: str | None = None,
        exc: BaseException | None = None,
        when: Any = None,
        is_eager: bool = False,
        sig: Any = None,
        max_attempts: int | None = None,
        **kwargs: Any,
    ) -> None:
        self.message = message
        self.exc = exc
        self.when = when
        self.is_eager = is_eager
        self.sig = sig
        reason = message or (f"Retry in {when}: {exc!r}" if exc is not None else None)
        super().__init__(_delay_of(when), reason, max_attempts=max_attempts)

    def humanize(self) -> str:
        return f"in {self.when}" if self.when is not None else "now"


#: pgtasks' exceptions a result's ``get()`` raises, re-exported for ``except`` clauses.
TaskFailedError = TaskFailed
JobRevoked = JobCancelled
