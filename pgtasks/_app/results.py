"""Waiting for results: ``job.get()`` / ``await job.aget()``.

One ResultListener per App and process holds a connection (the session DSN: LISTEN
needs a server session of its own) that LISTENs on the schema's "done" channel; every
finishing write (and cancel, and rescue to failed) notifies it with the ids of the jobs
that ended. Waiters register a callback for their job id and re-read the row when woken.
A polling fallback covers a missed notification or a listener that is reconnecting (or,
behind a transaction pooler without session_dsn, absent), so a waiter never depends on
NOTIFY alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import psycopg

from .._errors import JobCancelled, JobNotFoundError, PayloadError, TaskFailed
from .._payload import Unreadable
from .._retry import reconnect_delay
from .routing import StoreView


class ResultsApp(StoreView, Protocol):
    """What the result reads take of an App: its database, its statements and its
    process's listener."""

    def result_listener(self) -> ResultListener: ...


logger = logging.getLogger("pgtasks.results")

#: Seconds between re-reads while the listener is healthy (a notification was missed).
HEALTHY_POLL = 2.0
#: First and longest re-read interval while the listener is down.
FAST_POLL, SLOW_POLL = 0.05, 1.0


class ResultListener:
    """LISTEN on the done channel in a daemon thread; wake the waiters of each id."""

    def __init__(self, app: ResultsApp) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._waiters: dict[int, set[Callable[[], None]]] = {}
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._closing = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None

    @property
    def healthy(self) -> bool:
        return self._ready.is_set()

    def subscribe(self, job_id: int, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from the listener thread) when job ``job_id`` may have ended.

        Without a session connection (a pooled dsn without session_dsn) nothing listens:
        the listener never becomes healthy and waiters poll the row.
        """
        with self._lock:
            self._waiters.setdefault(job_id, set()).add(callback)
            listening = self.app.database.has_session
            if listening and (self._thread is None or not self._thread.is_alive()):
                self._closing.clear()
                self._thread = threading.Thread(
                    target=self._run, name="pgtasks-results", daemon=True
                )
                self._thread.start()

        def unsubscribe() -> None:
            with self._lock:
                callbacks = self._waiters.get(job_id)
                if callbacks is not None:
                    callbacks.discard(callback)
                    if not callbacks:
                        del self._waiters[job_id]

        return unsubscribe

    def wait_ready(self, timeout: float) -> bool:
        """Wait until the listener listens (False at once when nothing can listen)."""
        if not self.app.database.has_session:
            return False
        return self._ready.wait(timeout)

    def close(self) -> None:
        self._closing.set()
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(2.0)
        self._thread = None

    def _run(self) -> None:
        failures = 0
        while not self._closing.is_set():
            try:
                with self.app.database.connect(
                    session=True, application_name="pgtasks results"
                ) as conn:
                    self.app.queries.listen(conn, self.app.queries.done_channel)
                    self._ready.set()
                    failures = 0
                    while not self._closing.is_set():
                        for notify in conn.notifies(timeout=0.5):
                            self._dispatch(notify.payload)
            except Exception as error:  # never die while `healthy` could still say True
                self._ready.clear()
                failures += 1
                if failures == 1 and isinstance(error, psycopg.Error):
                    logger.warning("result listener lost its connection, retrying: %s", error)
                elif failures == 1:
                    logger.exception("result listener failed, restarting it")
                self._closing.wait(reconnect_delay(failures))
        self._ready.clear()

    def _dispatch(self, payload: str) -> None:
        with self._lock:
            callbacks = [
                callback
                for part in payload.split(",")
                # Any role may NOTIFY this channel: only ASCII digits are ids.
                if part.isascii() and part.isdigit()
                for callback in self._waiters.get(int(part), ())
            ]
        for callback in callbacks:
            try:
                callback()
            except Exception:
                logger.exception("a result waiter's wake-up failed")


def outcome_of(job_id: int, row: dict[str, Any] | None) -> tuple[bool, Any]:
    """(finished, result) for a row of ``get_job_outcome``; raises for failed/cancelled."""
    if row is None:
        raise JobNotFoundError(f"job {job_id} does not exist (it may have been pruned)")
    status = row["status"]
    if status == "done":
        result = row["result"]
        if isinstance(result, Unreadable):
            raise PayloadError(f"the result of job {job_id} cannot be decoded: {result.reason}")
        return True, result
    if status == "failed":
        raise TaskFailed(job_id, row["last_error"])
    if status == "cancelled":
        raise JobCancelled(job_id)
    return False, None


class _Polling:
    """When a waiter re-reads its job's row: every HEALTHY_POLL seconds while the listener
    is healthy, else from FAST_POLL doubling up to SLOW_POLL; never past ``timeout``."""

    def __init__(self, job_id: int, timeout: float | None) -> None:
        self.job_id = job_id
        self.timeout = timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.poll = FAST_POLL

    @property
    def first_wait(self) -> float:
        """How long to wait for the listener to be ready before the first read."""
        return min(1.0, self.timeout) if self.timeout is not None else 1.0

    def next_wait(self, row: dict[str, Any] | None, healthy: bool) -> float:
        """Seconds until the next read; TimeoutError once the timeout has passed."""
        remaining = None if self.deadline is None else self.deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            status = row["status"] if row else "unknown"
            raise TimeoutError(
                f"job {self.job_id} did not finish within {self.timeout:g} s (status: {status})"
            )
        interval = HEALTHY_POLL if healthy else self.poll
        self.poll = min(SLOW_POLL, self.poll * 2)
        return interval if remaining is None else min(interval, remaining)


def wait_for_result(app: ResultsApp, job_id: int, timeout: float | None) -> Any:
    listener = app.result_listener()
    woken = threading.Event()
    unsubscribe = listener.subscribe(job_id, woken.set)
    polling = _Polling(job_id, timeout)
    try:
        listener.wait_ready(polling.first_wait)
        while True:
            row = app.database.run(lambda conn: app.queries.get_job_outcome(conn, job_id))
            finished, result = outcome_of(job_id, row)
            if finished:
                return result
            woken.wait(polling.next_wait(row, listener.healthy))
            woken.clear()
    finally:
        unsubscribe()


async def await_result(app: ResultsApp, job_id: int, timeout: float | None) -> Any:
    listener = app.result_listener()
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()

    def wake() -> None:
        with contextlib.suppress(RuntimeError):  # the loop may be closed by now
            loop.call_soon_threadsafe(woken.set)

    unsubscribe = listener.subscribe(job_id, wake)
    polling = _Polling(job_id, timeout)
    try:
        await loop.run_in_executor(None, listener.wait_ready, polling.first_wait)
        while True:
            row = await app.database.arun(lambda conn: app.queries.aget_job_outcome(conn, job_id))
            finished, result = outcome_of(job_id, row)
            if finished:
                return result
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(woken.wait(), polling.next_wait(row, listener.healthy))
            woken.clear()
    finally:
        unsubscribe()
