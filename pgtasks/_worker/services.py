"""Background services of a worker: Heartbeat, Rescuer (and the healing pass it runs)
and Listener.

Each runs in its own thread on its own dedicated connection (connection.py: never the
app's pool, so a task that exhausts or leaks pooled connections cannot stop heartbeats
or rescue). A service that meets a database error logs it (at a bounded rate), drops its
connection and tries again with capped backoff; it never dies while the worker runs.
Each gets the worker's settings and what it calls: a registration, a store, callbacks.
"""

from __future__ import annotations

import abc
import dataclasses
import logging
import random
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from .._retry import reconnect_delay
from .._store.queries import Queries
from .connection import Connect, OwnConnection
from .registration import Registration
from .settings import WorkerSettings

logger = logging.getLogger("pgtasks.worker")

#: Seconds between repeated log lines about one continuing database problem.
ERROR_LOG_INTERVAL = 10.0


class ErrorLog:
    """Logs a continuing failure once, then at most every ERROR_LOG_INTERVAL seconds."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.failing_since: float | None = None
        self.last_logged = 0.0

    def failed(self, error: BaseException) -> None:
        now = time.monotonic()
        if self.failing_since is None:
            self.failing_since = now
        if now - self.last_logged >= ERROR_LOG_INTERVAL:
            self.last_logged = now
            logger.warning(
                "%s: database error (%s), retrying: %s",
                self.what,
                type(error).__name__,
                str(error).strip().splitlines()[0] if str(error).strip() else "",
            )

    def recovered(self) -> None:
        if self.failing_since is not None:
            logger.info(
                "%s: database reachable again after %.1f s",
                self.what,
                time.monotonic() - self.failing_since,
            )
        self.failing_since = None
        self.last_logged = 0.0


class Service(abc.ABC):
    """A loop that calls ``run_once(conn)`` every ``interval`` seconds (with jitter), on a
    connection of its own from ``connect``; ``owner`` names the worker in logs."""

    name = "service"

    def __init__(
        self,
        owner: str,
        connect: Connect,
        interval: float,
        *,
        stopping: threading.Event | None = None,
    ) -> None:
        self.owner = owner
        self.interval = interval
        self.connection = OwnConnection(connect)
        #: Set by stop(); given, it is shared with what the service runs (the healer).
        self.stopping = stopping if stopping is not None else threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"pgtasks-{self.name}", daemon=True)
        self.errors = ErrorLog(f"{self.name} of worker {owner}")
        #: time.monotonic() of the last successful run_once (for health checks).
        self.last_success = 0.0

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout)

    @abc.abstractmethod
    def run_once(self, conn: psycopg.Connection[Any]) -> None:
        """One pass of the service's work."""

    def _next_wait(self) -> float:
        return self.interval * random.uniform(0.9, 1.1)  # noqa: S311 - spreading load only

    def _run(self) -> None:
        failures = 0
        wait = self._next_wait()
        while not self.stopping.wait(wait):
            try:
                self.run_once(self.connection.get())
            except psycopg.Error as error:
                failures += 1
                self.errors.failed(error)
                self.connection.drop()
                wait = reconnect_delay(failures)
                continue
            except Exception:
                failures += 1
                logger.exception("%s of worker %s failed; continuing", self.name, self.owner)
                wait = reconnect_delay(failures)
                continue
            failures = 0
            self.errors.recovered()
            self.last_success = time.monotonic()
            wait = self._next_wait()
        self.connection.drop()


class Heartbeat(Service):
    """Refreshes the worker's heartbeat (re-registering when the registration was
    removed), checks for cancellations whose notification was missed, and stores the
    counters the worker counted since the last beat (nothing on the claim path waits
    for them: one statement per beat, none when nothing was counted)."""

    name = "heartbeat"

    def __init__(
        self,
        connect: Connect,
        settings: WorkerSettings,
        registration: Registration,
        *,
        poll_cancellations: Callable[[psycopg.Connection[Any]], None],
        store_counters: Callable[[psycopg.Connection[Any]], None] = lambda conn: None,
    ) -> None:
        super().__init__(registration.name, connect, settings.heartbeat_interval)
        self.registration = registration
        self.poll_cancellations = poll_cancellations
        self.store_counters = store_counters

    def run_once(self, conn: psycopg.Connection[Any]) -> None:
        self.registration.heartbeat(conn)
        self.poll_cancellations(conn)
        self.store_counters(conn)


class Rescuer(Service):
    """Returns jobs of dead workers to pending (or failed when out of attempts), and
    removes dead workers' registrations; then runs ``maintain`` on its connection (the
    healing pass of stuck workflow steps, when due)."""

    name = "rescuer"

    def __init__(
        self,
        connect: Connect,
        settings: WorkerSettings,
        registration: Registration,
        store: Queries,
        *,
        on_rescued: Callable[[int], None] = lambda count: None,
        on_expired: Callable[[int], None] = lambda count: None,
        maintain: Callable[[psycopg.Connection[Any]], object] = lambda conn: None,
        stopping: threading.Event | None = None,
    ) -> None:
        super().__init__(registration.name, connect, settings.rescue_interval, stopping=stopping)
        self.registration = registration
        self.queries = store
        self.lease_timeout = settings.lease_timeout
        self.on_rescued = on_rescued
        self.on_expired = on_expired
        self.maintain = maintain
        self.expiry_backoff_cap = settings.heal_interval
        self._next_expiry = 0.0

    def run_once(self, conn: psycopg.Connection[Any]) -> None:
        # Beat our own heart first: after an outage longer than the lease we would
        # otherwise rescue the jobs we are still running.
        self.registration.heartbeat(conn)
        store = self.queries
        lease_timeout = self.lease_timeout
        rescued = store.rescue_jobs(conn, lease_timeout=lease_timeout)
        for row in rescued:
            logger.warning(
                "rescued job %d (attempt %d) from lost worker %s: now %s",
                row["id"],
                row["attempts"],
                row["locked_by"],
                row["status"],
                extra={"job_id": row["id"], "attempt": row["attempts"]},
            )
        for row in store.delete_dead_workers(conn, lease_timeout=lease_timeout):
            logger.warning(
                "removed registration of dead worker %d (%s:%d)",
                row["id"],
                row["hostname"],
                row["pid"],
            )
        queues = {row["queue"] for row in rescued if row["status"] == "pending"}
        # The poll fallback of events' wake-ups: jobs waiting for a key with an event
        # they have not seen (an emit's notification missed) are made due.
        queues.update(row["queue"] for row in store.wake_event_waiters(conn))
        # Sequences whose turn a contended lock missed move on (they notify themselves).
        store.sequence_sweep(conn)
        for queue_name in queues:
            store.notify_queue(conn, queue_name)
        store.notify_done(conn, [row["id"] for row in rescued if row["status"] != "pending"])
        self.on_rescued(len(rescued))
        self._expire(conn)
        self.maintain(conn)

    def _expire(self, conn: psycopg.Connection[Any]) -> None:
        """End pending jobs past their start deadline (expires=) cancelled. The pass reads
        the due pending jobs: after a pass that found none, the next waits 100 times its
        duration (at most heal_interval), so a large backlog costs about 1 % of a pass."""
        now = time.monotonic()
        if now < self._next_expiry:
            return
        expired = self.queries.expire_jobs(conn)
        for job_id in expired:
            logger.info(
                "job %d expired before it started: cancelled", job_id, extra={"job_id": job_id}
            )
        self.on_expired(len(expired))
        elapsed = time.monotonic() - now
        self._next_expiry = now if expired else now + min(self.expiry_backoff_cap, 100 * elapsed)


@dataclasses.dataclass(frozen=True)
class ListenerCalls:
    """What the listener calls on its thread: ``wake`` the claim loop (an enqueue was
    notified for its queues, or the listener reconnected), ``cancel`` jobs a notification
    named, pass the ``paused`` queues on, ``poll_cancellations`` without LISTEN, and pass
    on ``limits_freed`` notifications (payload "<worker id>:<limit names>", migration
    flow_control; None: not listened to)."""

    wake: Callable[[], None]
    cancel: Callable[[set[int]], None]
    paused: Callable[[frozenset[str]], None]
    poll_cancellations: Callable[[psycopg.Connection[Any]], None]
    limits_freed: Callable[[str], None] | None = None
    #: Whether the worker claims limited jobs; while it does not, the listener looks for
    #: a stored limit at each read of the paused queues (a missed "changed" notification).
    limits_stored: Callable[[], bool] | None = None


class Listener(Service):
    """LISTENs for enqueue notifications and wakes the claim loop for its queues; passes
    cancellation requests and freed slots of limits on; reads the paused
    queues every ``paused_refresh`` seconds and passes them on.

    After (re)connecting it wakes the loop once, so jobs enqueued while it was away are
    claimed at once rather than at the next poll.

    ``listen=False`` (a pooled ``dsn`` without a session connection, where LISTEN cannot
    work): it only polls. Every ``paused_refresh`` seconds it reads the paused queues and
    calls ``poll_cancellations`` (so a cancelled job stops within that time, not the
    heartbeat's); the claim loop finds new jobs, and slots of limits other workers
    freed, at its poll interval.

    The paused queues are read here, on the listener's connection, so the claim loop
    pays nothing for them: one read of a table that holds a row per paused queue, every
    half poll interval. A notification for a queue it knows as paused (``resume_queue``
    sends one) reads them again at once, so a resumed queue is claimed without waiting.
    """

    name = "listener"

    def __init__(
        self,
        owner: str,
        connect: Connect,
        settings: WorkerSettings,
        store: Queries,
        calls: ListenerCalls,
        *,
        listen: bool = True,
    ) -> None:
        super().__init__(owner, connect, interval=0.0)
        self.listen = listen
        self.queries = store
        self.calls = calls
        self.queues = set(settings.queues) if settings.queues is not None else None
        self.paused_refresh = settings.paused_refresh
        self.paused: frozenset[str] = frozenset()

    def read_paused(self, conn: psycopg.Connection[Any]) -> float:
        """Read the paused queues and pass them on; returns when to read them next."""
        rows = self.queries.get_paused_queues(conn, socket.gethostname())  # the worker's
        self.paused = frozenset(row["queue"] for row in rows)
        self.calls.paused(self.paused)
        calls = self.calls
        if (
            calls.limits_stored is not None
            and calls.limits_freed is not None
            and not calls.limits_stored()
            and self.queries.count_limits(conn)
        ):
            calls.limits_freed("changed:")  # a limit was set since the worker started
        return time.monotonic() + self.paused_refresh

    def _next_wait(self) -> float:
        return 0.0

    def run_once(self, conn: psycopg.Connection[Any]) -> None:
        if not self.listen:
            self._poll(conn)
            return
        store = self.queries
        channels = [store.channel, store.cancel_channel]
        if self.calls.limits_freed is not None:
            channels.append(store.limits_channel)
        store.listen(conn, *channels)
        next_read = self.read_paused(conn)
        calls = self.calls
        calls.wake()
        self.errors.recovered()
        self.last_success = time.monotonic()
        queues = self.queues
        while not self.stopping.is_set():
            reread = False
            for notify in conn.notifies(timeout=min(0.2, self.paused_refresh)):
                if notify.channel == store.cancel_channel:
                    if notify.payload.isascii() and notify.payload.isdigit():
                        calls.cancel({int(notify.payload)})
                elif notify.channel == store.limits_channel:
                    if calls.limits_freed is not None:
                        calls.limits_freed(notify.payload)
                elif queues is None or notify.payload in queues:
                    reread = reread or notify.payload in self.paused
                    calls.wake()
            if reread or time.monotonic() >= next_read:
                next_read = self.read_paused(conn)
            self.last_success = time.monotonic()

    def _poll(self, conn: psycopg.Connection[Any]) -> None:
        """Without LISTEN: the paused queues and the cancellations, every paused_refresh."""
        self.read_paused(conn)
        self.calls.wake()
        self.errors.recovered()
        self.last_success = time.monotonic()
        while not self.stopping.wait(self.paused_refresh):
            self.read_paused(conn)
            self.calls.poll_cancellations(conn)
            self.last_success = time.monotonic()
