"""How an attempt's ending becomes an Outcome, given its Task: shared by every executor.

No I/O. The thread and async executors call these in the worker; a process-pool child
calls them after running the task, so its outcome arrives decided; the worker builds
the outcome of a child's death or hard timeout with them too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import _retry
from .._payload import encode_result
from .._retry import Outcome, RetryPolicy

if TYPE_CHECKING:
    from .._app.app import App
    from .._app.tasks import Task
    from .executor import ClaimedJob


def policy_of(task: Task[Any, Any]) -> RetryPolicy:
    return RetryPolicy(task.retry_backoff, task.retry_backoff_max, task.retry_jitter)


def unknown_task_outcome(task_name: str, app: App) -> Outcome:
    known = ", ".join(sorted(app.tasks)) or "none"
    return Outcome(
        "failed",
        "failed",
        error=(
            f"UnknownTaskError: no task named {task_name!r} is registered in this worker"
            f" (known: {known}); deploy the code that defines it, or run workers with"
            " --ignore-unknown to leave such jobs pending"
        ),
    )


def outcome_of_return(task: Task[Any, Any], value: Any) -> Outcome:
    try:
        return _retry.done(encode_result(task.name, value))
    except Exception as error:
        return Outcome("failed", "failed", error=_retry.describe_error(error))


def outcome_of_error(
    task: Task[Any, Any], attempt: int, max_attempts: int, error: BaseException
) -> Outcome:
    return _retry.after_error(
        error,
        attempt=attempt,
        max_attempts=max_attempts,
        policy=policy_of(task),
        dont_retry=task.dont_retry,
    )


def outcome_of_loss(task: Task[Any, Any], job: ClaimedJob, detail: str) -> Outcome:
    """The attempt's process died under it: one attempt used; the retry policy decides."""
    error = f"WorkerLostError: {detail}"
    if job.attempt >= job.max_attempts:
        return Outcome("failed", "failed", error=error)
    return Outcome(
        "retry", "pending", error=error, delay=_retry.backoff(job.attempt, policy_of(task))
    )


CANCELLED_BEFORE_START = Outcome(
    "cancelled", "failed", error="CancelledError: cancelled before start"
)
