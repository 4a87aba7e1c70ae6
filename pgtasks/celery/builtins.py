"""The app's built-in tasks (registered as ``celery.map``, ``celery.starmap`` and
``celery.errback`` with every Celery app, like Celery's own ``celery.*`` tasks)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._errors import JobNotFoundError, TaskFailed


def map(self: Any, task: str, it: Sequence[Any]) -> list[Any]:
    """``task.map(it)``: the task's body applied to each item, in this one job."""
    body = self.app.tasks[task]
    return [body(item) for item in it]


def starmap(self: Any, task: str, it: Sequence[Sequence[Any]]) -> list[Any]:
    """``task.starmap(it)`` (and each part of ``task.chunks(it, n)``)."""
    body = self.app.tasks[task]
    return [body(*item) for item in it]


def errback(
    self: Any,
    failure: dict[str, Any],
    task: str,
    args: list[Any],
    kwargs: dict[str, Any],
    immutable: bool,
) -> int:
    """A ``link_error`` enqueued by an earlier release (kept for its jobs: ``link_error``
    now starts the callback's own job with the workflow's input mode 'request'): enqueue
    the error callback ``task`` with Celery's (request, exception, traceback) in JSON
    form first; once per failed job (its id is the key)."""
    app = self.app
    job_id = failure.get("job_id")
    request: dict[str, Any] = {"id": str(job_id), "task": failure.get("task_name")}
    if isinstance(job_id, int):
        try:
            row = app.native.get_job(job_id).fetch()
        except JobNotFoundError:
            row = None
        if row is not None:
            request.update(
                args=row.args,
                kwargs=row.kwargs,
                retries=max(row.attempts - 1, 0),
                delivery_info={"routing_key": row.queue, "queue": row.queue},
            )
    error = failure.get("error") if isinstance(failure.get("error"), str) else None
    described = TaskFailed(job_id if isinstance(job_id, int) else None, error)
    exc_text = (
        f"{described.exc_type}: {described.message}" if described.message else described.exc_type
    )
    arguments = list(args) if immutable else [request, exc_text, error or "", *args]
    result = app.send_task(task, arguments, kwargs, task_id=f"celery.errback:{job_id}:{task}")
    return int(result.id)
