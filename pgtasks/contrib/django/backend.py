"""``PgTasksBackend``: a Django tasks backend that stores each task as a pgtasks job.

.. code-block:: python

    TASKS = {
        "default": {
            "BACKEND": "pgtasks.contrib.django.PgTasksBackend",
            "QUEUES": ["default", "emails"],      # optional: the queues tasks may name
            "OPTIONS": {"MAX_ATTEMPTS": 1},       # optional: attempts per task (default 1)
        }
    }
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, TypeVar

import psycopg
from asgiref.sync import sync_to_async
from django.core import checks
from psycopg import pq
from psycopg.types.json import JsonbLoader
from typing_extensions import ParamSpec

from ..._errors import PayloadError
from ..._jobs import JobSpec
from ..._payload import check_name, encode_arguments
from ..._store.queries import Queries
from ..._validation import whole_number
from ._compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    normalize_json,
    task_enqueued,
)
from .config import DjangoConfigurationError, get_app, pgtasks_settings, raw_connection
from .results import decoded, django_task_path, remember, result_from_row

T = TypeVar("T")
P = ParamSpec("P")

OPTION_KEYS = ("MAX_ATTEMPTS",)


class InvalidTaskArguments(InvalidTask, TypeError):  # type: ignore[misc]
    """A task's arguments cannot be stored as JSON: an ``InvalidTask`` and, as Django's
    own backends raise for them, a ``TypeError``."""


def loads_jsonb_as_text(conn: psycopg.Connection[Any]) -> bool:
    """Whether ``conn`` returns jsonb as text (Django registers such a loader: JSONField
    decodes itself), so that pgtasks' rows read through it need ``json.loads``."""
    jsonb = conn.adapters.types.get("jsonb")
    if jsonb is None:
        return False
    loader = conn.adapters.get_loader(jsonb.oid, pq.Format.TEXT)
    return loader is not None and not issubclass(loader, JsonbLoader)


class PgTasksBackend(BaseTaskBackend):  # type: ignore[misc]
    """Enqueues on Django's own database connection, so a task enqueued inside
    ``transaction.atomic()`` becomes a job exactly when (and if) that transaction commits.
    ``manage.py pgtasks_worker`` runs the tasks.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True
    #: What the worker checks before it runs a job's Django task on this backend.
    stores_pgtasks_jobs = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = sorted(set(self.options) - set(OPTION_KEYS))
        if unknown:
            raise DjangoConfigurationError(
                f"unknown OPTIONS key(s) of TASKS[{alias!r}]: {', '.join(map(repr, unknown))};"
                f" accepted: {', '.join(OPTION_KEYS)}"
            )
        try:
            self.max_attempts: int = whole_number(
                "MAX_ATTEMPTS", self.options.get("MAX_ATTEMPTS", 1)
            )
        except Exception as error:
            raise DjangoConfigurationError(f"TASKS[{alias!r}]['OPTIONS']: {error}") from None

    # -- enqueue --
    def _spec(self, task: Task[Any, Any], args: Any, kwargs: Any) -> JobSpec:
        self.validate_task(task)
        try:
            # The job's task name is the task's own path: what every listing shows.
            task_name = check_name("task", task.module_path)
        except ValueError as error:
            raise InvalidTask(str(error)) from None
        try:
            # What Django's own backends accept (its TaskResult normalises them so), then
            # JSON text: anything else is a TypeError, as there.
            payload = json.loads(json.dumps(normalize_json([list(args), dict(kwargs)])))
        except RecursionError:
            raise InvalidTask(
                f"the arguments of task {task.module_path!r} are nested too deeply to store"
                " (pgtasks stores JSON nested at most 100 levels deep)"
            ) from None
        except (TypeError, ValueError) as error:
            raise InvalidTaskArguments(
                f"the arguments of task {task.module_path!r} are not JSON-serialisable: {error}"
            ) from None
        app = get_app()
        try:
            _, kwargs_json = encode_arguments(
                task_name,
                (),
                {
                    "task": task.module_path,
                    "args": payload[0],
                    "kwargs": payload[1],
                    "backend": self.alias,
                },
                max_bytes=app.max_payload_bytes,
            )
        except PayloadError as error:
            raise InvalidTask(str(error)) from None
        remember(task)
        return JobSpec(
            task_name=task_name,
            queue=task.queue_name,
            priority=task.priority,
            args_json="[]",
            kwargs_json=kwargs_json,
            max_attempts=self.max_attempts,
            run_at=task.run_after,
        )

    def enqueue(
        self,
        task: Task[P, T],
        args: Any,
        kwargs: Any,
    ) -> TaskResult[T]:
        spec = self._spec(task, args, kwargs)
        app = get_app()
        conn = raw_connection(pgtasks_settings()["DATABASE"])
        handle = app.enqueue(spec, connection=conn)
        result = self._get_result(handle.id)
        task_enqueued.send(type(self), task_result=result)
        return result

    async def aenqueue(self, task: Task[P, T], args: Any, kwargs: Any) -> TaskResult[T]:
        return await sync_to_async(self.enqueue, thread_sensitive=True)(task, args, kwargs)

    @property
    def max_result_bytes(self) -> int:
        """The size limit of a stored return value (the App's ``max_result_bytes``)."""
        return get_app().max_result_bytes

    # -- results --
    def _store(self) -> Queries:
        return get_app().queries

    def _get_result(self, job_id: int) -> TaskResult[Any]:
        conn = raw_connection(pgtasks_settings()["DATABASE"])
        row = self._store().get_job(conn, job_id)
        # get_job's jsonb loads guarded whatever loader Django's connection registered
        # (a row nested past the bound reads as unreadable): its values come decoded.
        json_text = False
        if row is None or django_task_path(row, decoded(row.kwargs, json_text)) is None:
            raise TaskResultDoesNotExist(f"no task result with id {job_id!r}")
        return result_from_row(row, self.alias, json_text=json_text)

    def get_result(self, result_id: str) -> TaskResult[Any]:
        try:
            job_id = int(str(result_id), 10)
        except ValueError:
            raise TaskResultDoesNotExist(f"no task result with id {result_id!r}") from None
        if not 0 < job_id < 2**63:
            raise TaskResultDoesNotExist(f"no task result with id {result_id!r}")
        return self._get_result(job_id)

    async def aget_result(self, result_id: str) -> TaskResult[Any]:
        return await sync_to_async(self.get_result, thread_sensitive=True)(result_id)

    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:
        from django.db import connections

        yield from super().check(**kwargs)
        try:
            alias = pgtasks_settings()["DATABASE"]
        except DjangoConfigurationError as error:
            yield checks.Error(str(error), id="pgtasks.E001")
            return
        if connections[alias].vendor != "postgresql":
            yield checks.Error(
                f"PgTasksBackend needs PostgreSQL: DATABASES[{alias!r}] uses"
                f" {connections[alias].vendor}",
                id="pgtasks.E002",
            )
