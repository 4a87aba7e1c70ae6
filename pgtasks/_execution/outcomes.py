"""How an attempt's ending becomes an Outcome, given its Task: shared by every executor.

No I/O. The thread and async executors call these in the worker; a process-pool child
calls them after running the task, so its outcome arrives decided; the worker builds
the outcome of a child's death or hard timeout with them too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import _retry
from .._dsn import redact
from .._payload import encode_result
from .._retry import Outcome, RetryPolicy
from .._text import storable, truncate

if TYPE_CHECKING:
    from .._app.app import App
    from .._app.tasks import Task
    from .._leases import ClaimedJob
    from .process_pool import Ending
    from .running import Running


def policy_of(task: Task[Any, Any]) -> RetryPolicy:
    return RetryPolicy(
        task.retry_backoff, task.retry_backoff_max, task.retry_jitter, task.retry_timeouts
    )


#: Seconds a job of a task this worker does not know waits before it may be claimed again.
UNKNOWN_TASK_DELAY = 60.0
#: The exception type recorded for such a release (the worker counts it: unknown_task_jobs).
UNKNOWN_TASK_ERROR = "pgtasks.UnknownTaskError"


def unknown_task_outcome(task_name: str, app: App) -> Outcome:
    """A job of a task this worker does not know is never failed: another app or a newer
    deploy may know it. Workers claim only the tasks they know, so this happens only when a
    process-pool child lacks a task its parent has: the job goes back to pending after
    UNKNOWN_TASK_DELAY seconds, the reason in its history."""
    known = ", ".join(sorted(app.tasks)) or "none"
    return Outcome.retry(
        UNKNOWN_TASK_DELAY,
        f"UnknownTaskError: no task named {task_name!r} is registered in this process"
        f" (known: {known}); the job was left for a worker that knows it (retried in"
        f" {UNKNOWN_TASK_DELAY:g} s)",
        UNKNOWN_TASK_ERROR,
    )


def malformed_arguments_outcome(
    args: object, kwargs: object, undecodable: str | None = None
) -> Outcome | None:
    """A failed outcome when a row's args are not a JSON array or its kwargs not an object,
    or its payloads could not be decoded (``undecodable``: why; a row written by hand or by
    another tool): the task never runs with wrong inputs."""
    if undecodable is not None:
        return Outcome.failed(f"UndecodableJobError: this job {undecodable} (the task was not run)")
    problems = []
    if not isinstance(args, list):
        problems.append(f"args must be a JSON array, got {_json_kind(args)}")
    if not isinstance(kwargs, dict):
        problems.append(f"kwargs must be a JSON object, got {_json_kind(kwargs)}")
    if not problems:
        return None
    return Outcome.failed("MalformedJobError: " + "; ".join(problems) + " (the task was not run)")


def _json_kind(value: object) -> str:
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return kinds.get(type(value), "a number")


def failed_to_start_outcome(error: BaseException) -> Outcome:
    """The job could not be started (the process pool failed to start, a bug): it fails."""
    return Outcome.failed(f"pgtasks could not start this job: {_retry.describe_error(error)}")


#: The outcome of a task that returned None (most do): one object, not encoded each time.
_DONE_WITH_NONE = Outcome.done("null")


def outcome_of_return(task: Task[Any, Any], value: Any) -> Outcome:
    if value is None:
        return _DONE_WITH_NONE
    try:
        return Outcome.done(encode_result(task.name, value, max_bytes=task.app.max_result_bytes))
    except Exception as error:
        return Outcome.failed(_retry.describe_error(error))


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
    kind = "pgtasks.WorkerLostError"
    if job.attempt >= job.max_attempts:
        return Outcome.failed(error, kind)
    return Outcome.retry(_retry.backoff(job.attempt, policy_of(task)), error, kind)


CANCELLED_BEFORE_START = Outcome.cancelled("CancelledError: cancelled before start")


def storable_outcome(outcome: Outcome, *, max_error_bytes: int, secrets: Sequence[str]) -> Outcome:
    """``outcome`` as the worker may store and log it: its error text without the
    connection password (any form of it), with unencodable characters and NUL escaped,
    and cut to ``max_error_bytes``. Task code chooses that text; it can stop no worker.
    """
    error = outcome.error
    if error is None:
        return outcome
    clean = truncate(storable(redact(error, tuple(secrets))), max_error_bytes)
    return outcome if clean == error else dataclasses.replace(outcome, error=clean)


def outcome_of_ending(task: Task[Any, Any], job: ClaimedJob, ending: Ending) -> Outcome:
    """The outcome of a process-pool job from how the pool says it ended (not released)."""
    if ending.kind == "outcome" and ending.outcome is not None:
        return ending.outcome
    if ending.kind == "timeout":
        outcome = _retry.after_timeout(
            task.timeout or 0.0,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            policy=policy_of(task),
        )
        detail = f"; its worker child {ending.pid} was stopped (it exited with {ending.detail})"
        return dataclasses.replace(outcome, error=f"{outcome.error}{detail}")
    if ending.kind == "terminated":
        return Outcome.cancelled(
            f"Terminated: worker child {ending.pid} running this attempt was stopped on"
            f" request (it exited with {ending.detail})"
        )
    if ending.kind == "lost":
        return outcome_of_loss(task, job, ending.detail)
    return CANCELLED_BEFORE_START


def expire_attempt(running: Running) -> Outcome:
    """The outcome of a thread attempt past its deadline (its code keeps running: its
    late end is ignored), with the lines it logged so far."""
    task = running.task
    if task is None or task.timeout is None:
        raise ValueError(f"job {running.job.id} has no timeout to expire")
    running.abandon()
    outcome = _retry.after_timeout(
        task.timeout,
        attempt=running.job.attempt,
        max_attempts=running.job.max_attempts,
        policy=policy_of(task),
    )
    log = running.log
    if log is None or log.empty:
        return outcome
    return dataclasses.replace(outcome, logs_json=log.to_json())
