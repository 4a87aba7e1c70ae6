"""DebounceQueries: enqueues of debounced jobs (``sql/debounce.sql``; migration debounce).

Each debounced job is written by two statements in one transaction: a transaction-level
advisory lock on (schema, task, key), then the statement that replaces the pending job
of that key or inserts a new one. The lock makes concurrent enqueues of one key take
turns, and each turn's lookup runs after the previous turn committed: one job per key,
the last arguments win. In a caller's transaction (``connection=``) the lock is held to
its end, as its other row locks are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from .._jobs import DebouncedJobSpec, InsertedJob, JobSpec
from .base import Params, QueriesBase, Row
from .unique import aatomic, atomic

#: The advisory lock class of debounce keys ("pgtd").
ADVISORY_LOCK_CLASS_DEBOUNCE = 0x70677464


def debounce_params(spec: DebouncedJobSpec) -> Params:
    return {
        "task_name": spec.task_name,
        "queue": spec.queue,
        "priority": spec.priority,
        "args": spec.args_json,
        "kwargs": spec.kwargs_json,
        "max_attempts": spec.max_attempts,
        "meta": spec.meta_json,
        "debounce_key": spec.debounce_key,
        "debounce": spec.debounce_seconds,
        "debounce_max": spec.debounce_max_seconds,
    }


def is_debounced(specs: Sequence[JobSpec]) -> bool:
    return any(isinstance(spec, DebouncedJobSpec) for spec in specs)


class DebounceQueries(QueriesBase):
    """Insert or replace debounced jobs; read the pending ones per task."""

    def _debounce_lock_key(self, spec: DebouncedJobSpec) -> Params:
        key = f"{self.schema}\x1f{spec.task_name}\x1f{spec.debounce_key}"
        return {"lock_class": ADVISORY_LOCK_CLASS_DEBOUNCE, "lock_key": key}

    def lock_debounce_key(self, conn: psycopg.Connection[Any], spec: DebouncedJobSpec) -> None:
        """Take the key's advisory lock to the end of the transaction."""
        self._rows(conn, "lock_debounce_key", self._debounce_lock_key(spec))

    async def alock_debounce_key(
        self, conn: psycopg.AsyncConnection[Any], spec: DebouncedJobSpec
    ) -> None:
        await self._arows(conn, "lock_debounce_key", self._debounce_lock_key(spec))

    def debounce_job(self, conn: psycopg.Connection[Any], spec: DebouncedJobSpec) -> InsertedJob:
        """Replace the key's pending job or insert one (under the key's lock)."""
        row = self._rows(conn, "debounce_job", debounce_params(spec), tuples=True)[0]
        return InsertedJob(int(row[0]), bool(row[1]))

    async def adebounce_job(
        self, conn: psycopg.AsyncConnection[Any], spec: DebouncedJobSpec
    ) -> InsertedJob:
        rows = await self._arows(conn, "debounce_job", debounce_params(spec), tuples=True)
        return InsertedJob(int(rows[0][0]), bool(rows[0][1]))

    def insert_debounced_job(
        self, conn: psycopg.Connection[Any], spec: DebouncedJobSpec
    ) -> InsertedJob:
        """The job of ``spec``'s key, replaced (existed: True) or new (False)."""
        with atomic(conn):
            self.lock_debounce_key(conn, spec)
            return self.debounce_job(conn, spec)

    async def ainsert_debounced_job(
        self, conn: psycopg.AsyncConnection[Any], spec: DebouncedJobSpec
    ) -> InsertedJob:
        async with aatomic(conn):
            await self.alock_debounce_key(conn, spec)
            return await self.adebounce_job(conn, spec)

    def debounce_stats(self, conn: psycopg.Connection[Any]) -> list[Row]:
        """Per task with pending debounced jobs: jobs, replaced (in all), most_replaced."""
        return self._rows(conn, "debounce_stats", None)
