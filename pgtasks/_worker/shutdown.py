"""A worker's graceful stop (GracefulStop).

On stop: jobs claimed but not started are released at once; running ones get the
shutdown timeout; then children still busy are terminated, what is left is released
without using up its attempt, the last outcomes are written and the registration is
removed. Every database step is bounded (SHUTDOWN_WRITE_BOUND), and the steps after the
deadline together (AFTER_DEADLINE_BOUND), so an unresponsive database cannot keep the
process from exiting. Its ``step`` says what it is doing (the
watchdog of a signalled worker names it when the stop is stuck: signals.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from .._counters import RELEASED_AT_SHUTDOWN
from .._retry import reconnect_delay

if TYPE_CHECKING:
    from .._execution.running import Running
    from .._store.ports import WorkerPort
    from .exchange import Exchanges
    from .parts import LoopParts
    from .services import Service

logger = logging.getLogger("pgtasks.worker")

#: Longest a stopping worker waits for each of its final database steps (release and
#: last outcomes, deregistration), and for its background services to end, so that an
#: unresponsive database cannot keep it from exiting.
SHUTDOWN_WRITE_BOUND = 3.0
SHUTDOWN_SERVICES_BOUND = 2.0
#: Longest the steps after the stop deadline take together (the release and last
#: outcomes, the services, the deregistration): each step gets its own bound or what is
#: left of this, so a database that answers nothing costs 6.5 s past the deadline, not
#: the sum of the bounds (the watchdog, signals.STOP_MARGIN, comes after).
AFTER_DEADLINE_BOUND = 6.5
#: What the services leave of AFTER_DEADLINE_BOUND to the deregistration.
_DEREGISTRATION_SHARE = 1.5
#: A step is never given less than this (a database that answers takes milliseconds).
_LEAST_STEP = 0.25
#: Tries of each final database step.
_WRITE_TRIES = 3


def _within(bound: float, end: float) -> float:
    """A step's bound: its own, or what is left before ``end`` (never under _LEAST_STEP)."""
    return max(_LEAST_STEP, min(bound, end - time.monotonic()))


class GracefulStop:
    """The stopping steps of one worker, run once by its loop thread."""

    def __init__(
        self,
        parts: LoopParts,
        *,
        store: WorkerPort,
        exchanges: Exchanges,
        services: Sequence[Service],
        wake_event: threading.Event,
        deadline: Callable[[], float | None],
        store_counters: Callable[[psycopg.Connection[Any]], None] = lambda conn: None,
        note: Callable[[str], None] = lambda step: None,
    ) -> None:
        self.name = parts.name
        self.queries = store
        self.registration = parts.registration
        self.ledger = parts.ledger
        self.executor = parts.executor
        self.exchanges = exchanges
        self.connection = parts.connection
        self.services = services
        self.reporter = parts.reporter
        self.errors = parts.errors
        self.wake_event = wake_event
        #: The stop deadline (time.monotonic()); a second signal can bring it forward.
        self.deadline = deadline
        #: Stores what the worker counted since its last heartbeat (before deregistering).
        self.store_counters = store_counters
        #: Told each step as it begins (what a stuck stop waits for).
        self.note = note

    def run(self) -> None:
        ledger = self.ledger
        deadline = self.deadline() or time.monotonic()
        note = self.note
        # Jobs the background round trip claimed are started (or released below).
        note("stop step: the round trips in flight")
        self._bounded_settle()
        unstarted = self.executor.take_unstarted()
        if unstarted:
            # Claimed, waiting for a slot of their executor: they never ran, so release now.
            self._release(unstarted, why="stopping before they started")
        note("stop step: the running jobs to finish")
        if ledger.active():
            logger.info(
                "worker %s stopping: waiting up to %.1f s for %d running job(s)",
                self.name,
                max(0.0, deadline - time.monotonic()),
                len(ledger.active()),
            )
        while ledger.active() and time.monotonic() < (self.deadline() or 0.0):
            self.wake_event.wait(max(0.0, min(0.5, (self.deadline() or 0.0) - time.monotonic())))
            self.wake_event.clear()
            ledger.expire(self.executor)
            self._try_write()
        ledger.collect()
        if ledger.active():
            # Children running jobs are terminated first: a released job must not still run.
            note("stop step: the process pool's children to end")
            self.executor.stop_processes()
            ledger.collect()
        leftovers = ledger.active()

        def release_and_write() -> None:
            if leftovers:
                self._release(leftovers)
            self._try_write()

        # A database that stopped answering (a partition, a hung server) must not hold the
        # process past its deadline: unfinished writes are left to the rescuer.
        # The steps below share one bound, counted from the deadline (or from now, for a
        # stop already late).
        end = max(self.deadline() or 0.0, time.monotonic()) + AFTER_DEADLINE_BOUND
        note("stop step: the release of jobs and the last outcomes")
        self._bounded(
            "release and final writes", release_and_write, _within(SHUTDOWN_WRITE_BOUND, end)
        )
        note("stop step: the services to stop")
        self.executor.cancel_async()
        for service in self.services:
            service.stopping.set()
        services_deadline = time.monotonic() + min(
            SHUTDOWN_SERVICES_BOUND,
            max(0.0, end - _DEREGISTRATION_SHARE - time.monotonic()),
        )
        for service in self.services:
            service.stop(timeout=max(0.0, services_deadline - time.monotonic()))
        note("stop step: the deregistration")
        self._bounded("deregistration", self._deregister, _within(SHUTDOWN_WRITE_BOUND, end))
        note("stop step: the executors to stop")
        self.executor.shutdown()
        note("stop step: the round-trip lanes to close")
        self.exchanges.close()
        self.connection.drop()

    def _bounded_settle(self) -> None:
        """Apply the background round trip before stopping; a database that does not
        answer is not waited for past SHUTDOWN_WRITE_BOUND (what it claimed is rescued)."""
        try:
            self.exchanges.settle_background(SHUTDOWN_WRITE_BOUND)
        except psycopg.Error as error:  # not expected: its errors are data, not raised
            logger.warning("worker %s: background round trip: %s", self.name, error)

    def _bounded(self, what: str, function: Any, seconds: float) -> None:
        """Run a shutdown step on a helper thread; give up on it after ``seconds``."""
        thread = threading.Thread(target=function, name=f"pgtasks-shutdown-{what}", daemon=True)
        thread.start()
        thread.join(seconds)
        if thread.is_alive():
            logger.warning(
                "worker %s: %s did not complete within %.1f s (database unresponsive); giving"
                " up: jobs still held will be rescued after the lease expires",
                self.name,
                what,
                seconds,
            )
            self.connection.abandon()  # still in use by the abandoned step: never shared

    def _tried(self, step: Callable[[], None]) -> bool:
        """Run a write of the shutdown, on a fresh connection after a failure, a few
        times at most: whether it went through."""
        for attempt in range(1, _WRITE_TRIES + 1):
            try:
                step()
                return True
            except psycopg.Error as error:
                self.errors.failed(error)
                self.connection.drop()
                if attempt < _WRITE_TRIES:
                    time.sleep(reconnect_delay(attempt))
        return False

    def _try_write(self) -> None:
        """Write every finished outcome, fenced; give up after a few tries."""

        def write() -> None:
            self.ledger.collect()
            if self.ledger.unwritten:
                self.exchanges.exchange(0)

        if not self._tried(write) and self.ledger.unwritten:
            logger.warning(
                "worker %s: could not record %d outcome(s); those jobs will be rescued and run"
                " again",
                self.name,
                len(self.ledger.unwritten),
            )
            self.ledger.replace_unwritten([])

    def _release(self, leftovers: list[Running], *, why: str = "shutdown deadline reached") -> None:
        for running in leftovers:
            running.abandon()
        released: set[int] = set()

        def release() -> None:
            conn = self.connection.get()
            released.update(self.queries.release_jobs(conn, [running.job for running in leftovers]))

        answered = self._tried(release)
        for running in leftovers:
            if running.trace is not None:
                try:
                    running.trace.end("released" if running.job.id in released else "lease_lost")
                except Exception:
                    logger.exception("job %d: ending its trace failed", running.job.id)
        self.reporter.count("released", len(released))
        self.reporter.exercised(RELEASED_AT_SHUTDOWN, len(released))
        if answered:
            for running in leftovers:
                if running.job.id not in released:
                    self.reporter.refused(running)  # the fence kept a lease lost meanwhile
        logger.warning(
            "worker %s: %s; released %d running job(s) back to pending (attempt not used up): %s",
            self.name,
            why,
            len(released),
            ", ".join(str(job_id) for job_id in sorted(released)) or "none",
        )

    def _deregister(self) -> None:
        worker_id = self.registration.worker_id
        if worker_id is None:
            return
        try:
            # What the worker counted since its last heartbeat, before it is gone.
            self.store_counters(self.connection.get())
        except psycopg.Error as error:
            logger.warning("worker %s: could not store its counters: %s", self.name, error)
            self.connection.drop()
        try:
            self.queries.deregister_worker(self.connection.get(), worker_id)
        except psycopg.Error as error:
            logger.warning("worker %s: could not deregister: %s", self.name, error)
