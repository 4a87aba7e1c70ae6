"""Eager mode: tasks run inline on ``delay()``, for unit tests of code that enqueues.

``App(eager=True)`` or ``with app.eager():``. Arguments go through the same validation
and JSON encoding as a real enqueue (and are decoded again, so a task sees exactly what
a worker would give it); the return value must be JSON too. Nothing touches the
database. The returned handle answers ``status()``, ``get()``, ``refresh()`` and
``cancel()`` from memory. A failure does not propagate from ``delay()``: ``get()``
raises TaskFailed with the traceback, as it would for a real job.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .. import _retry
from .._batches import BatchJob
from .._errors import TaskFailed
from .._jobs import CancelResult, JobContext, JobRow, JobSpec, JobStatus
from .._payload import encode_result
from .handle import JobHandle

if TYPE_CHECKING:
    from .app import App

_ids = itertools.count(1)


class EagerJobHandle(JobHandle[Any]):
    """The handle of a job that already ran inline."""

    __slots__ = ("error",)

    def __init__(self, app: App, row: JobRow, error: str | None) -> None:
        super().__init__(app, row.id)
        self.row = row
        self.error = error

    def status(self) -> JobStatus:
        assert self.row is not None  # noqa: S101 - always set for eager handles
        return self.row.status

    async def astatus(self) -> JobStatus:
        return self.status()

    def fetch(self) -> JobRow:
        assert self.row is not None  # noqa: S101
        return self.row

    async def afetch(self) -> JobRow:
        return self.fetch()

    def get(self, timeout: float | None = None) -> Any:
        row = self.fetch()
        if row.status is JobStatus.FAILED:
            raise TaskFailed(row.id, row.last_error)
        return row.result

    async def aget(self, timeout: float | None = None) -> Any:
        return self.get(timeout)

    def cancel(self, *, terminate: bool = False) -> CancelResult:
        return CancelResult(self.id, "already_finished", self.status())

    async def acancel(self, *, terminate: bool = False) -> CancelResult:
        return self.cancel()


def _row(spec: JobSpec, status: JobStatus, result: Any, error: str | None) -> JobRow:
    now = datetime.now(timezone.utc)
    return JobRow(
        id=-next(_ids),  # negative: never a database id
        task_name=spec.task_name,
        queue=spec.queue,
        priority=spec.priority,
        args=json.loads(spec.args_json),
        kwargs=json.loads(spec.kwargs_json),
        status=status,
        attempts=1,
        max_attempts=spec.max_attempts,
        run_at=now,
        locked_at=now,
        locked_by=None,
        last_error=error,
        result=result,
        idempotency_key=spec.idempotency_key,
        created_at=now,
        updated_at=now,
        finished_at=now,
        meta=json.loads(spec.meta_json) if spec.meta_json else {},
        started_at=now,
    )


def _call(app: App, spec: JobSpec) -> tuple[Any, Any]:
    task = app.get_task(spec.task_name)
    args = json.loads(spec.args_json)
    kwargs = json.loads(spec.kwargs_json)
    if task.batch is not None:
        return task, _call_batch(task, spec, args, kwargs)
    if task.bind:
        context = JobContext.direct(
            task.name,
            max_attempts=spec.max_attempts,
            queue=spec.queue,
            meta=json.loads(spec.meta_json) if spec.meta_json else {},
        )
        args = [context, *args]
    return task, task.function(*args, **kwargs)


def _call_batch(task: Any, spec: JobSpec, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """A batch task's handler called with this one job (eager mode: one attempt); its
    decision is the job's result or error."""
    meta = json.loads(spec.meta_json) if spec.meta_json else {}
    job = BatchJob(
        0, args, kwargs, attempt=1, max_attempts=spec.max_attempts, queue=spec.queue, meta=meta
    )
    task.function([job])
    if job.decision == "error":
        raise job.value
    if job.decision == "fail":
        raise RuntimeError(job.value)
    if job.decision == "retry":
        raise RuntimeError("the batch handler asked for a retry (eager mode runs one attempt)")
    return job.value


def _finish(app: App, spec: JobSpec, task: Any, value: Any) -> EagerJobHandle:
    try:
        result = json.loads(encode_result(task.name, value))
    except Exception as error:
        return _failed(app, spec, error)
    return EagerJobHandle(app, _row(spec, JobStatus.DONE, result, None), None)


def _failed(app: App, spec: JobSpec, error: BaseException) -> EagerJobHandle:
    text = _retry.describe_error(error)
    return EagerJobHandle(app, _row(spec, JobStatus.FAILED, None, text), text)


def run_eagerly(app: App, specs: Sequence[JobSpec]) -> list[JobHandle[Any]]:
    handles: list[JobHandle[Any]] = []
    for spec in specs:
        task = app.get_task(spec.task_name)
        try:
            task, value = _call(app, spec)
            if task.is_async:
                value = asyncio.run(value)
        except Exception as error:
            handles.append(_failed(app, spec, error))
            continue
        handles.append(_finish(app, spec, task, value))
    return handles


async def arun_eagerly(app: App, specs: Sequence[JobSpec]) -> list[JobHandle[Any]]:
    handles: list[JobHandle[Any]] = []
    for spec in specs:
        task = app.get_task(spec.task_name)
        try:
            task, value = _call(app, spec)
            if task.is_async:
                value = await value
        except Exception as error:
            handles.append(_failed(app, spec, error))
            continue
        handles.append(_finish(app, spec, task, value))
    return handles
