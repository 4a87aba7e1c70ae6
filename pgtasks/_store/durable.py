"""DurableQueries: the Store's statements of durable steps, sleeps and waits for events
(``sql/durable.sql``). Every write of a running attempt is fenced by
its lease: the job's row is locked under the finish's condition."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import psycopg

from .base import QueriesBase, Row

#: First key of the advisory locks of event keys ("pgte"); the second is the key's hash.
ADVISORY_LOCK_CLASS_EVENTS = 0x70677465


def _lease(job_id: int, worker_id: int, attempt: int) -> dict[str, Any]:
    return {"job_id": job_id, "worker_id": worker_id, "attempt": attempt}


@dataclasses.dataclass(frozen=True)
class StepRecord:
    """One checkpoint to write under a lease (job_id, worker_id, attempt)."""

    job_id: int
    worker_id: int
    attempt: int
    name: str
    occurrence: int
    position: int
    status: str
    result_json: str | None
    error: str | None
    seconds: float

    def params(self) -> dict[str, Any]:
        return _lease(self.job_id, self.worker_id, self.attempt) | {
            "name": self.name,
            "occurrence": self.occurrence,
            "position": self.position,
            "status": self.status,
            "result": self.result_json,
            "error": self.error,
            "seconds": max(0.0, self.seconds),
        }


class DurableQueries(QueriesBase):
    """Checkpoints, parking, events and the reads of steps."""

    def load_job_steps(self, conn: psycopg.Connection[Any], job_id: int) -> list[Row]:
        """A job's checkpoints, in position order."""
        return self._rows(conn, "load_job_steps", {"job_id": job_id})

    def hold_job(
        self, conn: psycopg.Connection[Any], *, job_id: int, worker_id: int, attempt: int
    ) -> Row | None:
        """Lock the job's row under the lease (in the caller's transaction); None: lost."""
        rows = self._rows(conn, "hold_job", _lease(job_id, worker_id, attempt))
        return rows[0] if rows else None

    async def ahold_job(
        self, conn: psycopg.AsyncConnection[Any], *, job_id: int, worker_id: int, attempt: int
    ) -> Row | None:
        """:meth:`hold_job` on an async connection."""
        rows = await self._arows(conn, "hold_job", _lease(job_id, worker_id, attempt))
        return rows[0] if rows else None

    def record_job_step(self, conn: psycopg.Connection[Any], step: StepRecord) -> Row:
        """Write one checkpoint, fenced: ``held`` (the lease held), ``written``."""
        return self._rows(conn, "record_job_step", step.params())[0]

    async def arecord_job_step(self, conn: psycopg.AsyncConnection[Any], step: StepRecord) -> Row:
        """:meth:`record_job_step` on an async connection."""
        return (await self._arows(conn, "record_job_step", step.params()))[0]

    def park_job(
        self,
        conn: psycopg.Connection[Any],
        *,
        job_id: int,
        worker_id: int,
        attempt: int,
        marker_json: str,
        delay: float | None = None,
        until: datetime | str | None = None,
        step: tuple[str, int, int] | None = None,
    ) -> Row:
        """Park the running job until ``until`` (or ``delay`` s from now), its attempt
        given back, fenced; ``step`` (name, occurrence, position): a sleep's checkpoint
        written with it. Row: held, cancel_requested, parked, until, written."""
        name, occurrence, position = step if step is not None else (None, None, None)
        params = _lease(job_id, worker_id, attempt) | {
            "marker": marker_json,
            "delay": delay if delay is not None else 0.0,
            "until": until,
            "name": name,
            "occurrence": occurrence,
            "position": position,
        }
        return self._rows(conn, "park_job", params)[0]

    def unpark_job(
        self, conn: psycopg.Connection[Any], *, job_id: int, worker_id: int, attempt: int
    ) -> None:
        self._rows(conn, "unpark_job", _lease(job_id, worker_id, attempt))

    def _event_lock(self, key: str) -> dict[str, Any]:
        """The key's lock in this schema (another schema's same key is another lock)."""
        return {"lock_class": ADVISORY_LOCK_CLASS_EVENTS, "key": f"{self.schema}\x1f{key}"}

    def lock_event_key(self, conn: psycopg.Connection[Any], key: str) -> None:
        self._rows(conn, "lock_event_key", self._event_lock(key))

    async def alock_event_key(self, conn: psycopg.AsyncConnection[Any], key: str) -> None:
        await self._arows(conn, "lock_event_key", self._event_lock(key))

    def find_event(self, conn: psycopg.Connection[Any], *, key: str, after_id: int) -> Row | None:
        rows = self._rows(conn, "find_event", {"key": key, "after_id": after_id})
        return rows[0] if rows else None

    def start_wait(
        self,
        conn: psycopg.Connection[Any],
        *,
        job_id: int,
        key: str,
        after_id: int,
        timeout: float | None,
    ) -> Row:
        params = {"job_id": job_id, "key": key, "after_id": after_id, "timeout": timeout}
        return self._rows(conn, "start_wait", params)[0]

    def end_wait(self, conn: psycopg.Connection[Any], job_id: int) -> None:
        self._rows(conn, "end_wait", {"job_id": job_id})

    def emit_event(self, conn: psycopg.Connection[Any], *, key: str, payload_json: str) -> Row:
        """Record an event and wake its waiters (the key's lock taken first, in a
        statement of its own: the insert's snapshot then sees every wait committed)."""
        self.lock_event_key(conn, key)
        return self._rows(conn, "emit_event", {"key": key, "payload": payload_json})[0]

    async def aemit_event(
        self, conn: psycopg.AsyncConnection[Any], *, key: str, payload_json: str
    ) -> Row:
        """:meth:`emit_event` on an async connection."""
        await self.alock_event_key(conn, key)
        return (await self._arows(conn, "emit_event", {"key": key, "payload": payload_json}))[0]

    def wake_event_waiters(self, conn: psycopg.Connection[Any]) -> list[Row]:
        return self._rows(conn, "wake_event_waiters", None)

    def prune_job_events(
        self, conn: psycopg.Connection[Any], *, older_than: float, limit: int
    ) -> Row:
        params = {"older_than": older_than, "limit": limit}
        return self._rows(conn, "prune_job_events", params)[0]

    def get_job_steps(self, conn: psycopg.Connection[Any], job_id: int) -> list[Row]:
        return self._rows(conn, "get_job_steps", {"job_id": job_id})

    def copy_job_steps(
        self, conn: psycopg.Connection[Any], *, source_id: int, job_id: int, before: int | None
    ) -> int:
        params = {"source_id": source_id, "job_id": job_id, "before": before}
        return int(self._rows(conn, "copy_job_steps", params)[0]["copied"])

    def restore_job_steps(self, conn: psycopg.Connection[Any], job_id: int) -> int:
        """A retried job's checkpoints back from its meta, before its first failed step."""
        return int(self._rows(conn, "restore_job_steps", {"job_id": job_id})[0]["copied"])

    def count_parked_jobs(self, conn: psycopg.Connection[Any]) -> list[Row]:
        return self._rows(conn, "count_parked_jobs", None)
