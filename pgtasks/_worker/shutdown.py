"""A Worker's graceful stop and its signal handling (a mixin of Worker).

On stop: jobs claimed but not started are released at once; running ones get the
shutdown timeout; then children still busy are terminated, what is left is released
without using up its attempt, the last outcomes are written and the registration is
removed. Every database step is bounded (SHUTDOWN_WRITE_BOUND), so an unresponsive
database cannot keep the process from exiting; a signalled worker still stuck past the
timeout + HARD_EXIT_MARGIN ends its process (its jobs are rescued after the lease).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING, Any

import psycopg

if TYPE_CHECKING:
    from .._app.app import App
    from .._execution.executor import Executor, Running
    from .._retry import Outcome
    from .background import BackgroundExchanger
    from .services import ErrorLog, Service

logger = logging.getLogger("pgtasks.worker")

#: Longest a stopping worker waits for each of its final database steps (release and
#: last outcomes, deregistration), and for its background services to end, so that an
#: unresponsive database cannot keep it from exiting.
SHUTDOWN_WRITE_BOUND = 3.0
SHUTDOWN_SERVICES_BOUND = 2.0
#: Seconds past the shutdown timeout after which a signalled worker that is still stuck
#: (in a database call that never returns) ends its process anyway.
HARD_EXIT_MARGIN = 8.0


class WorkerShutdown:
    """Stopping steps of :class:`~pgtasks.Worker` (which provides the state below)."""

    if TYPE_CHECKING:
        app: App
        name: str
        shutdown_timeout: float

        @property
        def worker_id(self) -> int | None: ...

        counts: dict[str, int]
        _executor: Executor
        _in_flight: dict[int, Running]
        _unwritten: list[tuple[Running, Outcome]]
        _stop_deadline: float | None
        _wake_event: threading.Event
        _stopped: threading.Event
        _services: list[Service]
        _conn: psycopg.Connection[Any] | None
        _errors: ErrorLog
        _background: BackgroundExchanger | None

        def stop(self, timeout: float | None = None, *, wait: bool = True) -> None: ...
        def _collect(self) -> None: ...
        def _expire(self) -> None: ...
        def _count(self, name: str, amount: int = 1) -> None: ...
        def _notify(self, event: str, *arguments: Any) -> None: ...
        def _connection(self) -> psycopg.Connection[Any]: ...
        def _drop_connection(self) -> None: ...
        def _write_outcomes(self) -> None: ...
        def _settle_background(self, timeout: float = ...) -> None: ...

    def _active(self) -> list[Running]:
        return [running for running in self._in_flight.values() if not running.abandoned]

    def _shutdown(self) -> None:
        deadline = self._stop_deadline if self._stop_deadline is not None else time.monotonic()
        # Jobs the background round trip claimed are started (or released below).
        self._bounded_settle()
        unstarted = self._executor.take_unstarted()
        if unstarted:
            # Claimed, waiting for a slot of their executor: they never ran, so release now.
            self._release(unstarted, why="stopping before they started")
        if self._active():
            logger.info(
                "worker %s stopping: waiting up to %.1f s for %d running job(s)",
                self.name,
                max(0.0, deadline - time.monotonic()),
                len(self._active()),
            )
        while self._active() and time.monotonic() < (self._stop_deadline or 0.0):
            self._wake_event.wait(
                max(0.0, min(0.5, (self._stop_deadline or 0.0) - time.monotonic()))
            )
            self._wake_event.clear()
            self._expire()
            self._try_write()
        self._collect()
        if self._active():
            # Children running jobs are terminated first: a released job must not still run.
            self._executor.stop_processes()
            self._collect()
        leftovers = self._active()

        def release_and_write() -> None:
            if leftovers:
                self._release(leftovers)
            self._try_write()

        # A database that stopped answering (a partition, a hung server) must not hold the
        # process past its deadline: unfinished writes are left to the rescuer.
        self._bounded("release and final writes", release_and_write, SHUTDOWN_WRITE_BOUND)
        self._executor.cancel_async()
        for service in self._services:
            service.stopping.set()
        services_deadline = time.monotonic() + SHUTDOWN_SERVICES_BOUND
        for service in self._services:
            service.stop(timeout=max(0.0, services_deadline - time.monotonic()))
        self._bounded("deregistration", self._deregister, SHUTDOWN_WRITE_BOUND)
        self._executor.shutdown()
        if self._background is not None:
            self._background.close()
        self._drop_connection()
        self._notify("worker_stopped", self)
        logger.info("worker %s stopped (%s)", self.name, self._summary())

    def _bounded_settle(self) -> None:
        """Apply the background round trip before stopping; a database that does not
        answer is not waited for past SHUTDOWN_WRITE_BOUND (what it claimed is rescued)."""
        try:
            self._settle_background(SHUTDOWN_WRITE_BOUND)
        except psycopg.Error as error:  # not expected: its errors are data, not raised
            logger.warning("worker %s: background round trip: %s", self.name, error)

    def _bounded(self, what: str, function: Any, seconds: float) -> None:
        """Run a shutdown step on a helper thread; give up on it after ``seconds``."""
        thread = threading.Thread(target=function, name=f"pgtasks-shutdown-{what}", daemon=True)
        thread.start()
        thread.join(seconds)
        if thread.is_alive():
            logger.warning(
                "worker %s: %s did not complete within %g s (database unresponsive); giving"
                " up: jobs still held will be rescued after the lease expires",
                self.name,
                what,
                seconds,
            )
            self._conn = None  # still in use by the abandoned step: never shared again

    def _try_write(self) -> None:
        for attempt in range(3):
            try:
                self._write_outcomes()
                return
            except psycopg.Error as error:
                self._errors.failed(error)
                self._drop_connection()
                if attempt < 2:
                    time.sleep(0.2 * (attempt + 1))
        if self._unwritten:
            logger.warning(
                "worker %s: could not record %d outcome(s); those jobs will be rescued and run"
                " again",
                self.name,
                len(self._unwritten),
            )
            self._unwritten = []

    def _release(self, leftovers: list[Running], *, why: str = "shutdown deadline reached") -> None:
        by_owner: dict[int, list[Running]] = {}
        for running in leftovers:
            running.abandoned = True
            by_owner.setdefault(running.job.worker_id, []).append(running)
        released: set[int] = set()
        for attempt in range(3):
            try:
                conn = self._connection()
                for owner, items in by_owner.items():
                    released |= self.app.store.release_jobs(
                        conn,
                        worker_id=owner,
                        leases=[(running.job.id, running.job.attempt) for running in items],
                    )
                break
            except psycopg.Error as error:
                self._errors.failed(error)
                self._drop_connection()
                if attempt < 2:
                    time.sleep(0.2 * (attempt + 1))
        self._count("released", len(released))
        logger.warning(
            "worker %s: %s; released %d running job(s) back to pending (attempt not used up): %s",
            self.name,
            why,
            len(released),
            ", ".join(str(job_id) for job_id in sorted(released)) or "none",
        )

    def _deregister(self) -> None:
        worker_id = self.worker_id
        if worker_id is None:
            return
        try:
            self.app.store.deregister_worker(self._connection(), worker_id)
        except psycopg.Error as error:
            logger.warning("worker %s: could not deregister: %s", self.name, error)

    def _summary(self) -> str:
        return ", ".join(f"{name}={count}" for name, count in sorted(self.counts.items())) or "idle"

    def _exit_if_stuck(self, seconds: float) -> None:
        """After a stop signal: end the process if the loop is stuck in a database call.

        A database that accepts packets but never answers (a hung server, a blackholing
        proxy) can block a read forever; the jobs this process holds are rescued after
        the lease like those of a crashed worker.
        """
        if self._stopped.wait(seconds):
            return
        logger.error(
            "worker %s did not stop within %g s of the signal (database unresponsive);"
            " exiting now: the jobs it holds will be rescued after the lease expires",
            self.name,
            seconds,
        )
        logging.shutdown()
        os._exit(1)

    def _install_signal_handlers(self) -> dict[int, Any]:
        signals_seen = 0

        def handle(signum: int, frame: FrameType | None) -> None:
            nonlocal signals_seen
            signals_seen += 1
            name = signal.Signals(signum).name
            if signals_seen == 1:
                logger.info(
                    "worker %s: %s received, stopping (running jobs get %g s; send it again to"
                    " release them at once)",
                    self.name,
                    name,
                    self.shutdown_timeout,
                )
                self.stop(wait=False)
                threading.Thread(
                    target=self._exit_if_stuck,
                    args=(self.shutdown_timeout + HARD_EXIT_MARGIN,),
                    name="pgtasks-exit-watchdog",
                    daemon=True,
                ).start()
            else:
                logger.info("worker %s: second %s, releasing running jobs now", self.name, name)
                self.stop(timeout=0, wait=False)

        previous: dict[int, Any] = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, handle)
        return previous
