"""pgtasks job rows as Django ``TaskResult`` values."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from django.utils.module_loading import import_string

from ..._jobs import AttemptError, JobRow, JobStatus
from ._compat import InvalidTask, Task, TaskError, TaskResult, TaskResultStatus

#: The pgtasks task that runs Django tasks; its kwargs: task, args, kwargs, backend.
RUN_TASK_NAME = "pgtasks.django.run"

#: What a cancelled job's last error says it was (Django tasks have no cancelled status).
CANCELLED_ERROR_CLASS = "pgtasks.JobCancelled"

STATUSES = {
    JobStatus.PENDING: TaskResultStatus.READY,
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.DONE: TaskResultStatus.SUCCESSFUL,
    JobStatus.FAILED: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
}


def decoded(value: Any, json_text: bool) -> Any:
    """A jsonb value as read; ``json_text``: the connection loads jsonb as text (Django's
    connections do: its JSONField decodes)."""
    return json.loads(value) if json_text and isinstance(value, str) else value


def exception_class_path(error_text: str) -> str:
    """The exception class a pgtasks error text (a formatted traceback) ends with."""
    lines = error_text.strip().splitlines()
    head = (lines[-1] if lines else "").partition(":")[0]
    if not head or " " in head or not head.replace(".", "").replace("_", "").isalnum():
        return "builtins.Exception"
    return head if "." in head else f"builtins.{head}"


def task_error(error_text: str, exception_type: str | None = None) -> TaskError:
    path = exception_type or exception_class_path(error_text)
    if "." not in path:
        path = f"builtins.{path}"
    return TaskError(exception_class_path=path, traceback=error_text)


def load_task(path: object) -> Task[Any, Any]:
    """The Django Task a job names (the module-level object ``@task`` created)."""
    if not isinstance(path, str):
        raise InvalidTask(f"a pgtasks job names no Django task (got {path!r})")
    try:
        task = import_string(path)
    except ImportError as error:
        raise InvalidTask(f"cannot import the Django task {path!r}: {error}") from None
    if not isinstance(task, Task):
        raise InvalidTask(f"{path!r} is not a Django task (decorate the function with @task)")
    return task


def job_task(row: JobRow, payload: dict[str, Any], backend: str) -> Task[Any, Any]:
    """The job's task with the queue, priority and backend it was enqueued with."""
    task = load_task(payload.get("task"))
    changes: dict[str, Any] = {"queue_name": row.queue, "backend": backend}
    if task.priority != row.priority:
        changes["priority"] = row.priority
    if row.attempts == 0 and task.run_after is None and row.run_at > row.created_at:
        changes["run_after"] = row.run_at
    return dataclasses.replace(task, **changes)


def attempt_history(row: JobRow, json_text: bool) -> tuple[list[TaskError], list[str]]:
    """Errors (one per attempt that raised, then the cancellation) and worker ids (one
    per attempt, oldest first) from the job's attempt history; the last attempt's worker
    is ``locked_by``. A worker id unknown to the history is ``""``.
    """
    history = [
        AttemptError.from_json(entry)
        for entry in decoded(row.attempt_errors, json_text) or ()
        if isinstance(entry, dict)
    ]
    by_attempt = {entry.attempt: entry for entry in history if entry.attempt is not None}
    workers: list[str] = []
    for attempt in range(1, row.attempts + 1):
        entry = by_attempt.get(attempt)
        if entry is not None and entry.worker_id is not None:
            workers.append(str(entry.worker_id))
        elif attempt == row.attempts and row.locked_by is not None:
            workers.append(str(row.locked_by))
        else:
            workers.append("")
    errors = [
        task_error(entry.error, entry.exception_type)
        for entry in history
        if entry.error is not None
    ]
    if not history and row.last_error and row.status is not JobStatus.CANCELLED:
        errors.append(task_error(row.last_error))  # a row older than the history
    if row.status is JobStatus.CANCELLED:
        message = f"pgtasks.JobCancelled: job {row.id} was cancelled"
        errors.append(TaskError(exception_class_path=CANCELLED_ERROR_CLASS, traceback=message))
    return errors, workers


def result_from_row(row: JobRow, backend: str, *, json_text: bool) -> TaskResult[Any]:
    """The TaskResult of a ``pgtasks.django.run`` job (read with jsonb as text or not)."""
    payload = decoded(row.kwargs, json_text)
    if not isinstance(payload, dict):
        raise InvalidTask(f"job {row.id} carries no Django task payload")
    errors, worker_ids = attempt_history(row, json_text)
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    result: TaskResult[Any] = TaskResult(
        task=job_task(row, payload, str(payload.get("backend") or backend)),
        id=str(row.id),
        status=STATUSES[row.status],
        enqueued_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        last_attempted_at=row.locked_at if row.attempts else None,
        args=args if isinstance(args, list) else [],
        kwargs=kwargs if isinstance(kwargs, dict) else {},
        backend=str(payload.get("backend") or backend),
        errors=errors,
        worker_ids=worker_ids,
    )
    if row.status is JobStatus.DONE:
        object.__setattr__(result, "_return_value", decoded(row.result, json_text))
    return result
