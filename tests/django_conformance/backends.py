"""pgtasks' backend in the places of Django's ImmediateBackend and DummyBackend, for
Django's own tests of ``django.tasks`` (run.py puts these classes where Django's tests
import theirs).

- :class:`RunNowBackend` (for ImmediateBackend): ``PgTasksBackend`` whose ``enqueue``,
  once the job is stored, runs the queue's jobs at once with a real pgtasks worker (a
  thread of this process: claim, ``run_django_task``, the signals, the finish) and
  returns the finished result read back from the database.
- :class:`StoredBackend` (for DummyBackend): ``PgTasksBackend`` as it is (no worker, so
  results stay READY), plus the two helpers Django's tests read of the dummy backend:
  ``results`` (every task result of the schema, oldest first) and ``clear()``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.db import connections
from psycopg import sql

from pgtasks.contrib.django import PgTasksBackend
from pgtasks.contrib.django.config import get_app, pgtasks_settings, raw_connection
from pgtasks.contrib.django.worker import worker_app
from pgtasks.testing import run_until_empty

T = TypeVar("T")


def outside_event_loop(read: Callable[[], T]) -> T:
    """``read()`` here, or, called from a coroutine (Django's async tests read the dummy
    backend's results there), in a thread of its own with its own connection: Django
    refuses database I/O inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return read()

    def in_thread() -> T:
        try:
            return read()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(in_thread).result()


class RunNowBackend(PgTasksBackend):  # type: ignore[misc]
    """Enqueue, then run the task's queue until it is drained: what ImmediateBackend's
    callers see, through the database and a pgtasks worker."""

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        result = super().enqueue(task, args, kwargs)
        run_until_empty(worker_app(), queues=[task.queue_name], concurrency=1, timeout=60)
        return self.get_result(result.id)


class StoredBackend(PgTasksBackend):  # type: ignore[misc]
    """PgTasksBackend with DummyBackend's test helpers over the schema's jobs."""

    def _execute(self, statement: str) -> list[tuple[Any, ...]]:
        query = sql.SQL(statement).format(schema=sql.Identifier(get_app().schema))
        with raw_connection(pgtasks_settings()["DATABASE"]).cursor() as cursor:
            cursor.execute(query)
            return cursor.fetchall() if cursor.description is not None else []

    @property
    def results(self) -> list[Any]:
        def read() -> list[Any]:
            ids = self._execute("SELECT id FROM {schema}.all_jobs ORDER BY id")
            return [self.get_result(str(row[0])) for row in ids]

        return outside_event_loop(read)

    def clear(self) -> None:
        self._execute("DELETE FROM {schema}.jobs")
        self._execute("DELETE FROM {schema}.jobs_history")
