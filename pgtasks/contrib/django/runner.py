"""How a pgtasks worker runs Django tasks: each Django task the worker knows is a pgtasks
task of the same name (its path, ``module.function``), whose body is
:func:`run_django_task`; ``pgtasks.django.run`` runs the rows of earlier releases.

A job's kwargs hold the Django task's path, its arguments and the backend alias. The
worker reads the job back as a ``TaskResult`` through Django's connection (the task
resolved among the tasks it knows, never imported by name), sends ``task_started``,
calls the function (a ``takes_context`` task gets a ``TaskContext`` whose ``attempt`` is
the job's), sends ``task_finished`` and returns the value, which pgtasks stores as the
job's result. An exception fails the attempt as for any pgtasks task.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from ..._jobs import JobContext
from ..._payload import encode_result
from ._compat import (
    TaskContext,
    TaskError,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_finished,
    task_started,
)
from .results import RUN_TASK_NAME

if TYPE_CHECKING:
    from ..._app.app import App


def run_django_task(
    ctx: JobContext, task: str, args: list[Any], kwargs: dict[str, Any], backend: str
) -> Any:
    """Run one Django task (the body of the ``pgtasks.django.run`` pgtasks task)."""
    task_backend = task_backends[backend]
    if not getattr(task_backend, "stores_pgtasks_jobs", False):
        raise TypeError(
            f"TASKS[{backend!r}] is {type(task_backend).__name__}, not PgTasksBackend:"
            " a pgtasks worker runs the tasks of a PgTasksBackend only"
        )
    result = task_backend.get_result(str(ctx.job_id))
    # The attempt that runs now, whatever the row said when read.
    workers = [*result.worker_ids[: ctx.attempt - 1], str(ctx.worker_id)]
    workers += [""] * (ctx.attempt - len(workers))
    result = dataclasses.replace(
        result,
        status=TaskResultStatus.RUNNING,
        worker_ids=workers,
        last_attempted_at=result.last_attempted_at or timezone.now(),
        started_at=result.started_at or timezone.now(),
    )
    sender = type(task_backend)
    task_started.send(sender=sender, task_result=result)
    django_task = result.task
    try:
        if django_task.takes_context:
            value = django_task.call(TaskContext(task_result=result), *args, **kwargs)
        else:
            value = django_task.call(*args, **kwargs)
        # Encoded before task_finished says SUCCESSFUL: a value Django's backends refuse
        # (TypeError, as theirs), or one pgtasks cannot store, fails the task instead.
        value = normalize_json(value)
        encode_result(task, value, max_bytes=task_backend.max_result_bytes)
    except BaseException as error:
        failed = dataclasses.replace(
            result,
            status=TaskResultStatus.FAILED,
            finished_at=timezone.now(),
            errors=[
                *result.errors,
                TaskError(
                    exception_class_path=f"{type(error).__module__}.{type(error).__qualname__}",
                    traceback="".join(traceback.format_exception(error)),
                ),
            ],
        )
        task_finished.send(sender=sender, task_result=failed)
        raise
    finished = dataclasses.replace(
        result, status=TaskResultStatus.SUCCESSFUL, finished_at=timezone.now()
    )
    object.__setattr__(finished, "_return_value", value)
    task_finished.send(sender=sender, task_result=finished)
    return value


def register_runner(app: App) -> None:
    """Register ``pgtasks.django.run`` (the rows of earlier releases) with ``app`` (once)."""
    if RUN_TASK_NAME not in app.tasks:
        app.task(name=RUN_TASK_NAME, bind=True, max_attempts=1)(run_django_task)


#: The attribute that marks a runner registered for a Django task (its path).
DJANGO_TASK_MARK = "_pgtasks_django_task"


def runner_for(path: str) -> Callable[..., Any]:
    def run(
        ctx: JobContext,
        task: str = path,
        args: list[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        backend: str = "default",
    ) -> Any:
        return run_django_task(ctx, path, list(args or []), dict(kwargs or {}), backend)

    run.__name__ = run.__qualname__ = "run_django_task"
    setattr(run, DJANGO_TASK_MARK, path)
    return run
