"""Worker: the claim loop, slots, wake-ups, fenced completions and graceful shutdown.

One thread runs the loop below on its own connection; jobs run on the Executor;
Heartbeat, Rescuer, Listener, Pruner and BatchService run beside it (wired in
wiring.py). The Worker composes the parts that hold the state: the
Registration (its row and lease owner id), the JobLedger (jobs from claim to written
outcome), the Exchanges (the round trips that write outcomes and claim jobs, and the
claim position), the Reporter (logs, counters, observers), Cancellations, LoopFailures
(how a failed step is met) and, when stopping, GracefulStop (shutdown.py); a process's
SIGTERM/SIGINT go through StopSignals (signals.py), whose watchdog reads stop_status()
and calls release_held() (stuck.py) when the stop is stuck. Each gets the
WorkerSettings (settings.py) or the part of them it uses.

    loop:  write finished outcomes (one fenced statement per batch)
           time out sync attempts past their deadline
           claim up to the free slots (one statement, FOR UPDATE SKIP LOCKED)
           wait for: a finished job, a notification, the poll interval, stop()
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from typing_extensions import Unpack

from .._counters import RESCUED
from .._dsn import dsn_secrets
from .._execution.executor import Executor
from .._execution.outcomes import storable_outcome
from .._execution.running import Running
from .._retry import Outcome
from .arun import run_on_a_thread
from .cancellations import Cancellations
from .claims import FULL_CLAIM_SHARE as FULL_CLAIM_SHARE
from .claims import MAX_FULL_CLAIM_SPACING as MAX_FULL_CLAIM_SPACING
from .claims import Prefetch
from .connection import OwnConnection, connector
from .events import WorkerEvents
from .exchange import Exchanges
from .ledger import JobLedger
from .loop_failures import LoopFailures
from .parts import LoopParts
from .pool import PoolSize
from .registration import Registration
from .reporter import Reporter
from .services import ErrorLog, Service
from .settings import Setting, WorkerOptions, WorkerSettings, listed, refuse_unknown
from .shutdown import SHUTDOWN_WRITE_BOUND, GracefulStop
from .signals import StopSignals
from .stuck import release_held, stop_status
from .wiring import worker_services

if TYPE_CHECKING:
    from .._app.app import App

logger = logging.getLogger("pgtasks.worker")

#: Seconds the loop waits for more completions before writing a small batch.
LINGER = 0.001


class Worker:
    """Claims and runs jobs of ``queues`` (None: every queue of its ``store``) until stopped.

    ``run()`` blocks; ``await arun()`` runs it from an asyncio program; ``stop()``
    (thread-safe) stops claiming, lets running jobs finish for up to ``shutdown_timeout``
    seconds, releases the rest to pending without using up their attempt, and
    deregisters. The keywords beside ``observers`` are :class:`pgtasks.WorkerOptions`
    (each with its default there); they make a WorkerSettings
    (pgtasks/_worker/settings.py), and :meth:`from_settings` takes one made already
    (``pgtasks worker`` does)."""

    #: The settings as attributes (``worker.poll_interval``, ...), read from ``settings``.
    queues: Setting[list[str] | None] = Setting(listed)
    concurrency: Setting[int] = Setting()
    lease_timeout: Setting[float] = Setting()
    heartbeat_interval: Setting[float] = Setting()
    rescue_interval: Setting[float] = Setting()
    poll_interval: Setting[float] = Setting()
    shutdown_timeout: Setting[float] = Setting()
    ignore_unknown: Setting[bool] = Setting()
    #: Jobs claimed beyond the free slots (None: see claims.Prefetch).
    prefetch: Setting[int | None] = Setting()

    def __init__(
        self,
        app: App,
        queues: Sequence[str] | None = None,
        *,
        observers: Sequence[WorkerEvents] = (),
        **options: Unpack[WorkerOptions],
    ) -> None:
        refuse_unknown("Worker.__init__", options)
        self._configure(app, WorkerSettings.derive(app.settings, queues, **options), observers)

    @classmethod
    def from_settings(
        cls, app: App, settings: WorkerSettings, *, observers: Sequence[WorkerEvents] = ()
    ) -> Worker:
        """A worker of ``app`` with settings made already (WorkerSettings.derive)."""
        worker = cls.__new__(cls)
        worker._configure(app, settings, observers)
        return worker

    def _configure(
        self, app: App, settings: WorkerSettings, observers: Sequence[WorkerEvents]
    ) -> None:
        if not settings.queue_aging:  # the queues' own intervals (app.queue(priority_aging=))
            aged = ((q.queue, q.priority_aging) for q in app.queue_limits.values())
            queue_aging = tuple((name, s) for name, s in aged if s is not None)
            if queue_aging:
                settings = dataclasses.replace(settings, queue_aging=queue_aging)
        self.app = app = app.for_store(settings.store or app.store_name)  # its one store
        #: What this worker runs with, checked once (see WorkerSettings).
        self.settings = settings
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        self.name = f"{self.hostname}:{self.pid}"
        #: The worker's row in <schema>.workers; its id is the lease owner of new claims.
        self.registration = Registration(
            app.queries,
            name=self.name,
            hostname=self.hostname,
            pid=self.pid,
            queues=self.queues,
            concurrency=settings.concurrency,
            lease_timeout=settings.lease_timeout,
            task_names=lambda: sorted(self.app.tasks),
            pool=PoolSize(settings, lambda: getattr(self, "_executor", None)),
        )
        self._reporter = Reporter(observers)
        #: Counters since start (read by tests and the demo).
        self.counts = self._reporter.counts
        #: Opens the worker's own connections (claim loop, round trips, services).
        self._connect = connector(app.database, owner=self.name)
        self._connection = OwnConnection(self._connect)
        self._wake_event = threading.Event()
        self._notified = True  # claim at once on start
        self._ledger = JobLedger(self._wake_event, on_parked=self._reporter.parked)
        # Shared with the registration: a stopping worker keeps its heartbeat but never
        # registers again; a stopped one beats no more.
        self._stop_requested = self.registration.stopping
        self._stop_deadline: float | None = None
        self._stopped = self.registration.ended
        self._run_thread: threading.Thread | None = None
        self._errors = ErrorLog(f"claim loop of worker {self.name}")
        #: The forms of the connection password, scrubbed from every error text written.
        self._secrets: tuple[str, ...] = ()
        self._executor = self._new_executor()
        self._prefetch = Prefetch(settings.prefetch, lambda: self._executor.capacity)
        self._exchanges = self._new_exchanges()
        self._cancellations = self._new_cancellations()
        self._services: list[Service] = []
        #: What run() does now, in words (what a stuck stop waits for).
        self._phase = "not started"

    def __repr__(self) -> str:
        return f"<Worker {self.name} id={self.worker_id} queues={self.queues or 'all'}>"

    # -- public control --
    def stop(self, timeout: float | None = None, *, wait: bool = True) -> None:
        """Stop gracefully; running jobs get ``timeout`` (default shutdown_timeout) seconds.

        ``timeout=0`` releases running jobs at once. With ``wait`` (and when called from
        another thread than ``run()``'s) this returns once the worker has stopped.
        """
        grace = self.shutdown_timeout if timeout is None else max(0.0, float(timeout))
        deadline = time.monotonic() + grace
        if self._stop_deadline is None or deadline < self._stop_deadline:
            self._stop_deadline = deadline
        self._stop_requested.set()
        self._wake_event.set()
        if (
            wait
            and self._run_thread is not None
            and threading.current_thread() is not self._run_thread
        ):
            self._stopped.wait(grace + 15.0)

    @property
    def worker_id(self) -> int | None:
        """The current registration id (the lease owner of new claims); None until run()."""
        return self.registration.worker_id

    @property
    def observers(self) -> list[WorkerEvents]:
        return self._reporter.observers

    @property
    def running_jobs(self) -> int:
        return len(self._ledger.in_flight)

    @property
    def child_pids(self) -> list[int]:
        """Pids of the process pool's children serving jobs (empty without a pool)."""
        return self._executor.process_pids()

    @property
    def executor_description(self) -> str:
        """The executors in one line (``threads+async=1``), as the start banner says."""
        return self._executor.describe()

    def wake(self, *, notified: bool = False) -> None:
        if notified:
            self._notified = True
            exchanges = getattr(self, "_exchanges", None)
            if exchanges is not None:
                exchanges.wake_limited()
        self._wake_event.set()

    @property
    def paused_queues(self) -> frozenset[str]:
        """The paused queues as this worker last read them (left out of its claims)."""
        return self._exchanges.paused

    def _set_paused(self, paused: frozenset[str]) -> None:
        """The listener read the paused queues (its thread): claims use them from the
        next round trip on; a queue resumed wakes the loop to claim from it."""
        previous = self._exchanges.set_paused(paused)
        if previous != paused:
            logger.info(
                "worker %s: paused queues now %s",
                self.name,
                ", ".join(sorted(name or "(its host is paused)" for name in paused)) or "none",
            )
        if previous - paused:
            self.wake(notified=True)

    def _limits_freed(self, payload: str) -> None:
        """A notification on the limits channel (the listener's thread; any text a role
        may send): claim now when it calls for it (exchange.limits_notified)."""
        if self._exchanges.limits_notified(payload, self.worker_id):
            self._wake_event.set()

    def cancel_jobs(self, job_ids: set[int]) -> None:
        """A cancel notification named these jobs (the listener's thread): see
        cancellations.py."""
        self._cancellations.notified(job_ids)

    def poll_cancel_requests(self, conn: psycopg.Connection[Any]) -> None:
        """Heartbeat-time check for cancellations whose notification was missed."""
        self._cancellations.poll(conn)

    # -- counters of exercised guarantees --
    @property
    def counters(self) -> dict[str, int]:
        """What this worker counted of pgtasks._counters' names since it started (the
        database's totals, of every process: ``pgtasks stats --json``)."""
        return self._reporter.tally.totals()

    def store_counters(self, conn: psycopg.Connection[Any]) -> None:
        """Add what this worker counted since the last call to the database's counters
        (the heartbeat calls it; what fails to be stored is kept for the next call)."""
        self._reporter.store_counters(self.app.queries, conn)

    def _rescued(self, count: int) -> None:
        """The rescuer returned ``count`` jobs of dead workers (counted in the database)."""
        self._reporter.count("rescued", count)
        self._reporter.exercised(RESCUED, count, store=False)

    # -- parts --
    def _new_executor(self) -> Executor:
        counted, refused = self._reporter.exercised, self._reporter.refused
        finished = self._on_finished
        executor = self.settings.executor
        return Executor(
            self.app, executor, on_finished=finished, on_refused=refused, on_counted=counted
        )

    def _parts(self) -> LoopParts:
        return LoopParts(
            registration=self.registration,
            ledger=self._ledger,
            executor=self._executor,
            connection=self._connection,
            reporter=self._reporter,
            errors=self._errors,
        )

    def _new_exchanges(self) -> Exchanges:
        return Exchanges(
            self.settings,
            self._parts(),
            store=self.app.queries,
            prefetch=self._prefetch,
            tasks=self.app.tasks,
        )

    def _new_cancellations(self) -> Cancellations:
        return Cancellations(
            self._connect,
            store=self.app.queries,
            registration=self.registration,
            ledger=self._ledger,
            executor=self._executor,
        )

    def _new_services(self) -> list[Service]:
        return worker_services(self)

    # -- the loop --
    def run(self, *, install_signal_handlers: bool = False) -> None:
        """Run until stopped. Raises SchemaNotMigratedError before claiming on an old schema.

        ``install_signal_handlers`` (main thread): SIGTERM/SIGINT stop the worker from
        the first moment of run() until it returns (signals.py). Whenever a stop comes,
        it is honoured once every part has started; every part stops, started or not.
        """
        self._run_thread = threading.current_thread()
        signals = None
        if install_signal_handlers:
            signals = StopSignals(self.name, shutdown_timeout=self.shutdown_timeout)
            signals.install()
            signals.attach(self)
        try:
            worker_id = self._start()
            self._serve(worker_id)
        finally:
            if signals is not None:
                signals.restore()

    def _start(self) -> int:
        """Check the schema, start the executors, register: the registration id."""
        try:
            self._phase = "start: checking the schema"
            self.app.check_schema()
            self._secrets = dsn_secrets(self.app.dsn)
            self._executor = self._new_executor()
            self._exchanges = self._new_exchanges()
            self._cancellations = self._new_cancellations()
            try:
                # The job threads, and the process pool (its children import the app) before
                # any claim; what started is stopped again if anything below fails.
                self._phase = "start: the executors"
                self._executor.start()
                # Paused queues (and host) before the first claim and worker_id (registered).
                self._phase = "start: registration"
                connection, host = self._connection.get(), self.hostname
                paused = self.app.queries.get_paused_queues(connection, host)
                # Store this app's limits; with any limit stored, claims
                # take the jobs limits apply to first.
                stored = self.app.queries.upsert_limits(
                    self._connection.get(), self.app.limit_definitions()
                )
                self._exchanges.start(
                    paused=frozenset(row["queue"] for row in paused), limited=stored > 0
                )
                return self.registration.register(self._connection.get())
            except BaseException:
                self._executor.shutdown()
                raise
        except BaseException:
            self._phase = "stopped"
            self._stopped.set()  # stop() must not wait for a worker that never started
            raise

    def _serve(self, worker_id: int) -> None:
        """Start the services, run the loop (skipped when a stop came first), stop."""
        try:
            self._reporter.banner(self, worker_id)
            self._phase = "start: the services"
            self._services = self._new_services()
            for service in self._services:
                service.start()
            self._reporter.notify("worker_started", self)
            self._phase = "the claim loop"
            self._loop()
        finally:
            try:
                self._shutdown()
            finally:
                self._cancellations.close()
                self._phase = "stopped"
                self._stopped.set()

    def stop_status(self) -> str:
        """What the worker's stop still waits for, in words (any thread, never blocks)."""
        return stop_status(self._phase, self._run_thread, self._services, self._ledger)

    def release_held(self, seconds: float) -> str:
        """Release the jobs held (fenced) and deregister, on a connection of its own,
        within ``seconds`` (a stuck stop's last resort); what was done, in words."""
        return release_held(
            self._connect, self.app.queries, self.registration, self._ledger, seconds
        )

    async def arun(self) -> None:
        """Run the worker from an asyncio program: ``run()`` on a thread of its own while the
        awaiting task waits, so the event loop keeps serving.

        Cancelling the awaiting task stops the worker gracefully (:meth:`stop`: running jobs
        get ``shutdown_timeout`` seconds, the rest go back to pending), waits until it has
        stopped and deregistered, then re-raises ``CancelledError``; a second cancellation
        meanwhile releases the running jobs at once. An error of ``run()`` (an unmigrated
        schema, say) is raised here.
        """
        await run_on_a_thread(self.run, self.stop, name=f"pgtasks-worker-{self.name}")

    def _loop(self) -> None:
        exchanges = self._exchanges
        failures = LoopFailures(self._parts(), exchanges)
        next_poll = 0.0
        exchanges.start_background(self._connect, self._wake_event.set)
        while not self._stop_requested.is_set():
            self._wake_event.clear()
            self._ledger.set_quiet(False)
            try:
                exchanges.take_background()
                if failures.failures or exchanges.recover_needed:
                    exchanges.recover(SHUTDOWN_WRITE_BOUND)
                next_poll = self._step(next_poll)
                failures.succeeded()
            except Exception as error:
                pause = failures.handle(error)
                if pause:
                    self._wake_event.wait(pause)
                continue
            self._wake_event.wait(self._wait_time(next_poll))

    def _step(self, next_poll: float) -> float:
        """Collect outcomes; write them and claim when there is reason to. Returns the
        time of the next poll."""
        ledger, exchanges, reporter = self._ledger, self._exchanges, self._reporter
        ledger.collect()
        self._linger()
        ledger.expire(self._executor)
        now = time.monotonic()
        free = exchanges.pipeline - len(ledger.in_flight) - exchanges.claiming
        due = now >= next_poll or now >= reporter.next_due
        claim = free > 0 and (
            self._notified
            or exchanges.maybe_more
            or due
            # A slot of a limit came free (a limited job of ours ended, or another worker
            # notified one we wait for), or a rate token we wait for is due: claim now.
            or exchanges.limited_ended()
            or exchanges.limited_due(now)
        )
        if claim and exchanges.claim_filter() is None:
            claim = False  # every queue of this worker is paused: claim once one resumes
        if exchanges.batch_more(free if claim else 0):
            claim = False  # the round trip in flight is back soon: batch up meanwhile
        elif claim:
            self._notified = False
            if now >= reporter.next_due:
                reporter.due_claimed()
        if not claim and (not ledger.unwritten or exchanges.batch_more(0)):
            return next_poll
        if exchanges.lanes_full(now):
            # The first round trip back wakes the loop; the jobs that end meanwhile need not.
            ledger.set_quiet(True)
            return next_poll
        limit = exchanges.share(free) if claim else 0
        claimed = exchanges.send(limit, now)
        if claimed is None:
            # Off the loop thread: step again at once, so another lane can claim the rest.
            self._wake_event.set()
        elif claim:
            exchanges.claimed(claimed, limit)
        return time.monotonic() + self.poll_interval if claim else next_poll

    def _on_finished(self, running: Running, outcome: Outcome) -> None:
        """An attempt ended (on its thread, the event loop or the pool's supervisor): make
        its texts storable (escaped, capped, the password scrubbed), then hand it over."""
        self._prefetch.observe(time.monotonic() - running.started)
        try:
            outcome = storable_outcome(
                outcome, max_error_bytes=self.settings.max_error_bytes, secrets=self._secrets
            )
        except Exception as error:  # the job's end is never lost
            outcome = Outcome.failed(
                f"pgtasks could not store this attempt's outcome: {type(error).__name__}"
            )
        self._ledger.on_finished(running, outcome)

    def _linger(self) -> None:
        """With most slots still busy and few outcomes ready, wait a moment for more.

        Writing outcomes costs one round trip whatever their number: a millisecond of
        patience turns a trickle of single completions into batches.
        """
        ledger = self._ledger
        if self._exchanges.in_shares() and self._exchanges.background_busy:
            # Claimed in shares with a round trip out: batch_more() already holds back
            # a trickle, and the share's last jobs are what the next round trip waits for.
            return
        busy = len(ledger.in_flight)
        capacity = self._executor.capacity
        if ledger.unwritten and busy and len(ledger.unwritten) < busy and busy * 2 > capacity:
            time.sleep(LINGER)
            ledger.collect()

    def _wait_time(self, next_poll: float) -> float:
        now = time.monotonic()
        wake_at = min(next_poll, self._reporter.next_due)
        limited_at = self._exchanges.limited_wake_at
        if limited_at is not None and limited_at > now:
            # A rate token we wait for is due then (or a failed limited claim is retried).
            # One already due claims in the step, when a slot is free; without one, the
            # first job to end wakes the loop.
            wake_at = min(wake_at, limited_at)
        wait = max(0.0, wake_at - now)
        if self._exchanges.background_busy:
            # A poll or a due retry waits for the round trip in flight: its return wakes
            # the loop (and a claim right after it reads from the start if due).
            wait = self.poll_interval
        for running in self._ledger.in_flight.values():
            if running.deadline is not None and not running.abandoned:
                wait = min(wait, max(0.0, running.deadline - now))
        return wait

    def _shutdown(self) -> None:
        self._ledger.set_quiet(False)  # the stop waits on each job's end
        GracefulStop(
            self._parts(),
            store=self.app.queries,
            exchanges=self._exchanges,
            services=self._services,
            wake_event=self._wake_event,
            deadline=lambda: self._stop_deadline,
            store_counters=self.store_counters,
            note=lambda step: setattr(self, "_phase", step),
        ).run()
        self._reporter.notify("worker_stopped", self)
        logger.info("worker %s stopped (%s)", self.name, self._reporter.summary())
