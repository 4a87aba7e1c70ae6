"""pgtasks job rows as Django ``TaskResult`` values, and the Django tasks a job may name.

A Django task's job carries the task's own path (``module.function``, its
``module_path``) as its task name, so the admin, the dashboard, the CLI and stats show
it; its kwargs hold ``task`` (the same path), ``args``, ``kwargs`` and ``backend``. Rows
written by releases before this one have the task name ``pgtasks.django.run``.

A row never decides what code is imported: the task a job names is looked up among the
tasks this process knows (:func:`registered_task`): those it enqueued, those the worker
found when it loaded the project, and module-level tasks of modules already imported.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from ..._jobs import AttemptError, JobRow, JobStatus
from ._compat import InvalidTask, Task, TaskError, TaskResult, TaskResultStatus

#: The pgtasks task that ran Django tasks before each job carried its task's own path
#: (rows of earlier releases); its kwargs: task, args, kwargs, backend.
RUN_TASK_NAME = "pgtasks.django.run"

_lock = threading.Lock()
#: The Django tasks of this process by path: enqueued here, or found by the worker.
_registry: dict[str, Task[Any, Any]] = {}


def remember(task: Task[Any, Any]) -> None:
    """Know ``task`` by its path (the backend does so for each task it enqueues)."""
    path = task.module_path
    if _registry.get(path) is not task:
        with _lock:
            _registry[path] = task


def loaded_tasks(modules: Iterable[Any] | None = None) -> list[Task[Any, Any]]:
    """The module-level Django tasks of ``modules`` (default: every module imported so
    far), without importing anything or running a module's ``__getattr__``."""
    found: dict[str, Task[Any, Any]] = {}
    for module in list(sys.modules.values()) if modules is None else modules:
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, Mapping):
            continue
        for value in list(namespace.values()):
            # type(), not isinstance(): a lazy object's __class__ is never evaluated.
            if issubclass(type(value), Task) and value.module_path not in found:
                found[value.module_path] = value
    return list(found.values())


def registered_task(path: object) -> Task[Any, Any]:
    """The Django task a job names, if this process knows it; InvalidTask otherwise.

    Known: enqueued by this process, found by the worker, or a module-level task of a
    module already imported. A module a row names is never imported.
    """
    if not isinstance(path, str):
        raise InvalidTask(f"a pgtasks job names no Django task (got {path!r})")
    task = _registry.get(path)
    if task is not None:
        return task
    module_name, _, attribute = path.rpartition(".")
    module = sys.modules.get(module_name)
    value = module.__dict__.get(attribute) if module is not None else None
    if value is not None and issubclass(type(value), Task) and value.module_path == path:
        remember(value)
        return value
    if value is not None:
        raise InvalidTask(f"{path!r} is not a Django task (decorate the function with @task)")
    raise InvalidTask(
        f"the Django task {path!r} is not loaded in this process: pgtasks never imports"
        " a module a job names; import the task's module first (the worker imports each"
        " installed app's tasks module and PGTASKS['TASK_MODULES'])"
    )


def django_task_path(row: JobRow, payload: Any) -> str | None:
    """The path of the Django task a job runs, or None when it is not a Django task's job
    (a row of ``pgtasks.django.run`` names it in its kwargs; any other names it as its
    task and repeats it there)."""
    if not isinstance(payload, dict) or "backend" not in payload:
        return None
    if row.task_name == RUN_TASK_NAME:
        path = payload.get("task")
        return path if isinstance(path, str) else None
    return row.task_name if payload.get("task") == row.task_name else None


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
    """The TaskError of a stored error: its traceback ends with a newline, as one that
    Django's backends format does (pgtasks stores the text without it)."""
    path = exception_type or exception_class_path(error_text)
    if "." not in path:
        path = f"builtins.{path}"
    if error_text and not error_text.endswith("\n"):
        error_text += "\n"
    return TaskError(exception_class_path=path, traceback=error_text)


def job_task(row: JobRow, payload: dict[str, Any], backend: str) -> Task[Any, Any]:
    """The job's task with the queue, priority and backend it was enqueued with."""
    path = django_task_path(row, payload)
    if path is None:
        raise InvalidTask(f"job {row.id} is not the job of a Django task")
    task = registered_task(path)
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
    """The TaskResult of a Django task's job (read with jsonb as text or not)."""
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
