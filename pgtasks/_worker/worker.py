"""Worker: the claim loop, slots, wake-ups, fenced completions and graceful shutdown.

One thread runs the loop below on its own connection; jobs run on the Executor;
Heartbeat, Rescuer, Listener and Pruner run beside it (services.py, pruner.py). The
Worker composes the parts that hold the state: the Registration (its row and lease
owner id), the JobLedger (jobs from claim to written outcome), the Exchanges (the round
trips that write outcomes and claim jobs, and the claim position), the Reporter (logs,
counters, observers) and, when stopping, GracefulStop and StopSignals (shutdown.py).

    loop:  write finished outcomes (one fenced statement per batch)
           time out sync attempts past their deadline
           claim up to the free slots (one statement, FOR UPDATE SKIP LOCKED)
           wait for: a finished job, a notification, the poll interval, stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import psycopg

from .._app.loading import load_app
from .._counters import RESCUED
from .._errors import ConfigurationError
from .._execution.executor import Executor, ExecutorOptions, PoolName
from .._execution.outcomes import storable_outcome
from .._execution.process_pool import StartMethod
from .._execution.running import Running
from .._payload import check_name
from .._retry import Outcome, reconnect_delay
from .._store.database import is_transient
from .._store.db import dsn_secrets
from .._validation import seconds_at_least_zero, whole_number
from .claims import FULL_CLAIM_SHARE as FULL_CLAIM_SHARE
from .claims import MAX_FULL_CLAIM_SPACING as MAX_FULL_CLAIM_SPACING
from .claims import Prefetch
from .events import WorkerEvents
from .exchange import Exchanges
from .healer import Healer
from .ledger import JobLedger, LoopConnection
from .pruner import Pruner
from .registration import Registration
from .reporter import Reporter
from .services import ErrorLog, Heartbeat, Listener, Rescuer, Service, connector
from .shutdown import HARD_EXIT_MARGIN as HARD_EXIT_MARGIN
from .shutdown import SHUTDOWN_WRITE_BOUND, GracefulStop, StopSignals

if TYPE_CHECKING:
    from .._app.app import App

logger = logging.getLogger("pgtasks.worker")

#: Seconds the loop waits for more completions before writing a small batch.
LINGER = 0.001


def _seconds(name: str, value: float | None, default: float) -> float:
    if value is None:
        return default
    return seconds_at_least_zero(f"{name}=", value)


class Worker:
    """Claims and runs jobs of ``queues`` (None: every queue) until stopped.

    ``run()`` blocks; ``await arun()`` runs it from an asyncio program without blocking
    the event loop; ``stop()`` (thread-safe) stops claiming, lets running jobs finish
    for up to ``shutdown_timeout`` seconds, releases the rest back to pending without
    using up their attempt, and deregisters.
    """

    def __init__(
        self,
        app: App,
        queues: Sequence[str] | None = None,
        *,
        concurrency: int = 10,
        lease_timeout: float | None = None,
        heartbeat_interval: float | None = None,
        rescue_interval: float | None = None,
        poll_interval: float | None = None,
        shutdown_timeout: float = 30.0,
        ignore_unknown: bool = True,
        prefetch: int | None = None,
        observers: Sequence[WorkerEvents] = (),
        pool: str = "thread",
        processes: int | None = None,
        queue_executors: Mapping[str, str] | None = None,
        process_start_method: str = "spawn",
        app_path: str | None = None,
        max_tasks_per_child: int | None = None,
        max_memory_per_child: float | None = None,
        loop_lag_threshold: float | None = 0.5,
    ) -> None:
        whole_number("concurrency=", concurrency)
        if queues is not None:
            queues = [queue_name.strip() for queue_name in queues if queue_name.strip()]
            if not queues:
                raise ConfigurationError("queues= must name at least one queue (or be None)")
            for queue_name in queues:
                try:
                    check_name("queue", queue_name)
                except ValueError as error:
                    raise ConfigurationError(f"queues=: {error}") from None
        self.app = app
        self.queues: list[str] | None = list(queues) if queues is not None else None
        self.concurrency = concurrency
        self.lease_timeout = _seconds("lease_timeout", lease_timeout, app.lease_timeout)
        self.heartbeat_interval = _seconds(
            "heartbeat_interval", heartbeat_interval, app.heartbeat_interval
        )
        self.rescue_interval = _seconds("rescue_interval", rescue_interval, app.rescue_interval)
        self.poll_interval = _seconds("poll_interval", poll_interval, app.poll_interval)
        self.shutdown_timeout = _seconds("shutdown_timeout", shutdown_timeout, 30.0)
        if self.heartbeat_interval >= self.lease_timeout:
            raise ConfigurationError(
                f"heartbeat_interval ({self.heartbeat_interval:g} s) must be shorter than"
                f" lease_timeout ({self.lease_timeout:g} s)"
            )
        #: Kept for compatibility: a worker always claims only the tasks it knows.
        self.ignore_unknown = ignore_unknown
        if prefetch is not None:
            whole_number("prefetch=", prefetch, minimum=0)
        #: Jobs claimed beyond the free slots, waiting in this worker to start as slots free
        #: up: the next batch's round trip overlaps the current one's work. They are held
        #: (leased and heartbeated) while other workers might be idle. None (the default):
        #: two per slot while this worker's jobs are short (see claims.Prefetch), else none.
        self.prefetch = prefetch
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        self.name = f"{self.hostname}:{self.pid}"
        #: The worker's row in <schema>.workers; its id is the lease owner of new claims.
        self.registration = Registration(
            app.store,
            name=self.name,
            hostname=self.hostname,
            pid=self.pid,
            queues=self.queues,
            concurrency=concurrency,
            lease_timeout=self.lease_timeout,
            task_names=lambda: sorted(self.app.tasks),
        )
        self._reporter = Reporter(observers)
        #: Counters since start (read by tests and the demo).
        self.counts = self._reporter.counts
        #: Opens the worker's own connections (claim loop, round trips, services).
        self._connect = connector(app.database, owner=self.name)
        self._connection = LoopConnection(self._connect)
        self._wake_event = threading.Event()
        self._notified = True  # claim at once on start
        self._ledger = JobLedger(self._wake_event)
        # Shared with the registration: a stopping worker keeps its heartbeat but never
        # registers again; a stopped one beats no more.
        self._stop_requested = self.registration.stopping
        self._stop_deadline: float | None = None
        self._stopped = self.registration.ended
        self._run_thread: threading.Thread | None = None
        self._errors = ErrorLog(f"claim loop of worker {self.name}")
        #: The listener thread's connection to confirm cancel notifications (opened lazily).
        self._confirmations = LoopConnection(self._connect)
        #: The forms of the connection password, scrubbed from every error text written.
        self._secrets: tuple[str, ...] = ()
        #: Executors (see docs/howto/executors.md): ``pool`` is the default of sync tasks.
        self._executor_options = ExecutorOptions(
            concurrency=concurrency,
            pool=cast(PoolName, pool),
            processes=processes,
            queue_executors=cast("dict[str, PoolName]", dict(queue_executors or {})),
            process_start_method=cast(StartMethod, process_start_method),
            app_path=app_path,
            max_tasks_per_child=max_tasks_per_child,
            max_memory_per_child=max_memory_per_child,
            loop_lag_threshold=loop_lag_threshold or None,
        )
        self._executor = self._new_executor()
        self._prefetch = Prefetch(prefetch, lambda: self._executor.capacity)
        self._exchanges = self._new_exchanges()
        self._services: list[Service] = []

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
        previous, self._exchanges.paused = self._exchanges.paused, paused
        if previous != paused:
            logger.info(
                "worker %s: paused queues now %s",
                self.name,
                ", ".join(sorted(paused)) or "none",
            )
        if previous - paused:
            self.wake(notified=True)

    def _limits_freed(self, payload: str) -> None:
        """Another worker freed slots of limits (the listener's thread; the payload is
        "<worker id>:<limit names>", any text a role may send): claim now when this worker
        waits for one of them. Its own ends are claimed for in the round trip that wrote
        them."""
        owner, _, names = payload.partition(":")
        if owner == str(self.worker_id):
            return
        if self._exchanges.limited.freed(names.split(",")):
            self._wake_event.set()

    def cancel_jobs(self, job_ids: set[int]) -> None:
        """A cancel notification named these jobs (the listener's thread).

        A notification is only a hint: any role may send one on the channel. A job running
        here is cancelled once its row confirms ``cancel_requested``; on a database error
        the heartbeat's poll (:meth:`poll_cancel_requests`) confirms it later.
        """
        if not any(running.job.id in job_ids for running in list(self._ledger.in_flight.values())):
            return
        worker_id = self.worker_id
        if worker_id is None:
            return
        try:
            requested = self.app.store.get_cancel_requests(self._confirmations.get(), worker_id)
        except psycopg.Error as error:
            self._confirmations.drop()
            logger.warning(
                "worker %s: cannot confirm a cancellation (%s); the heartbeat will",
                self.name,
                error,
            )
            return
        self._cancel_confirmed(requested & job_ids)

    def _cancel_confirmed(self, job_ids: set[int]) -> None:
        """Ask running attempts of these jobs (cancel_requested on their rows) to stop."""
        for running in list(self._ledger.in_flight.values()):
            if running.job.id in job_ids and not running.cancel_requested:
                logger.info(
                    "job %d %s attempt %d: cancellation requested",
                    running.job.id,
                    running.job.task_name,
                    running.job.attempt,
                    extra={"job_id": running.job.id, "task": running.job.task_name},
                )
                self._executor.cancel(running)

    def poll_cancel_requests(self, conn: psycopg.Connection[Any]) -> None:
        """Heartbeat-time check for cancellations whose notification was missed."""
        worker_id = self.worker_id
        if worker_id is None or not self._ledger.in_flight:
            return
        requested = self.app.store.get_cancel_requests(conn, worker_id)
        if requested:
            self._cancel_confirmed(requested)

    # -- counters of exercised guarantees --
    @property
    def counters(self) -> dict[str, int]:
        """What this worker counted of pgtasks._counters' names since it started (the
        database's totals, of every process: ``pgtasks stats --json``)."""
        return self._reporter.tally.totals()

    def store_counters(self, conn: psycopg.Connection[Any]) -> None:
        """Add what this worker counted since the last call to the database's counters
        (the heartbeat calls it; what fails to be stored is kept for the next call)."""
        tally = self._reporter.tally
        counts = tally.unstored()
        if not counts:
            return
        try:
            self.app.store.add_counters(conn, counts)
        except BaseException:
            tally.give_back(counts)
            raise

    def _rescued(self, count: int) -> None:
        """The rescuer returned ``count`` jobs of dead workers (the rescue statement
        counted them in the database)."""
        self._reporter.count("rescued", count)
        self._reporter.exercised(RESCUED, count, store=False)

    # -- parts --
    def _new_executor(self) -> Executor:
        return Executor(
            self.app,
            self._executor_options,
            on_finished=self._on_finished,
            app_loader=load_app,
            on_refused=self._reporter.refused,
        )

    def _new_exchanges(self) -> Exchanges:
        return Exchanges(
            name=self.name,
            store=self.app.store,
            registration=self.registration,
            ledger=self._ledger,
            executor=self._executor,
            connection=self._connection,
            reporter=self._reporter,
            errors=self._errors,
            queues=self.queues,
            prefetch=self._prefetch,
            poll_interval=self.poll_interval,
            tasks=self.app.tasks,
        )

    def _new_services(self) -> list[Service]:
        """Heartbeat, rescuer (which runs the healer), listener and pruner, each given only
        what it uses.

        The listener and the pruner's session lock need a server session of their own:
        the session DSN. A pooled dsn without one: the listener polls, the pruner runs
        without its lock (docs/howto/deployment.md). The healer runs on the rescuer's
        connection: through a pooler, without its session lock.
        """
        app, owner, connect = self.app, self.name, self._connect
        sessions = app.database.has_session
        session = connector(app.database, owner=owner, session=True) if sessions else connect
        healer = Healer(owner, app.heal_interval, store=app.store, use_lock=not app.database.pooled)
        rescuer = Rescuer(
            owner,
            connect,
            self.rescue_interval,
            registration=self.registration,
            on_rescued=self._rescued,
            maintain=healer.run_if_due,
        )
        healer.stopping = rescuer.stopping  # a pass stops between steps when the worker does
        return [
            Heartbeat(
                owner,
                connect,
                self.heartbeat_interval,
                registration=self.registration,
                poll_cancellations=self.poll_cancel_requests,
                store_counters=self.store_counters,
            ),
            rescuer,
            Listener(
                owner,
                session,
                store=app.store,
                queues=self.queues,
                wake=lambda: self.wake(notified=True),
                cancel=self.cancel_jobs,
                paused=self._set_paused,
                paused_refresh=max(0.05, self.poll_interval / 2),
                limits_freed=self._limits_freed,
                listen=sessions,
                poll_cancellations=self.poll_cancel_requests,
            ),
            Pruner(
                owner,
                session,
                app.prune_interval,
                store=app.store,
                done_after=app.prune_done_after,
                failed_after=app.prune_failed_after,
                use_lock=sessions,
            ),
        ]

    # -- the loop --
    def run(self, *, install_signal_handlers: bool = False) -> None:
        """Run until stopped. Raises SchemaNotMigratedError before claiming on an old schema."""
        self._run_thread = threading.current_thread()
        try:
            self.app.check_schema()
            self._secrets = dsn_secrets(self.app.dsn)
            self._executor = self._new_executor()
            self._exchanges = self._new_exchanges()
            try:
                # The job threads, and the process pool (its children import the app) before
                # any claim; what started is stopped again if anything below fails.
                self._executor.start()
                # The paused queues before the first claim (the listener reads them after),
                # and before worker_id says the worker is registered.
                paused = self.app.store.get_paused_queues(self._connection.get())
                self._exchanges.paused = frozenset(row["queue"] for row in paused)
                # Store this app's limits (migration 0009); with any limit stored, claims
                # take the jobs limits apply to first.
                stored = self.app.store.upsert_limits(
                    self._connection.get(), self.app.limit_definitions()
                )
                self._exchanges.limited.stored = stored > 0
                worker_id = self.registration.register(self._connection.get())
            except BaseException:
                self._executor.shutdown()
                raise
        except BaseException:
            self._stopped.set()  # stop() must not wait for a worker that never started
            raise
        previous_handlers = (
            StopSignals(
                name=self.name,
                shutdown_timeout=self.shutdown_timeout,
                stop=self.stop,
                stopped=self._stopped,
            ).install()
            if install_signal_handlers
            else {}
        )
        logger.info(
            "worker %d (%s) started: queues=%s concurrency=%d executors=%s database=%s"
            " lease=%gs heartbeat=%gs rescue=%gs poll=%gs",
            worker_id,
            self.name,
            ",".join(self.queues) if self.queues else "*",
            self.concurrency,
            self._executor.describe(),
            self.app.describe_database(),
            self.lease_timeout,
            self.heartbeat_interval,
            self.rescue_interval,
            self.poll_interval,
            extra={"worker_id": worker_id},
        )
        if not self.app.database.has_session:
            logger.warning(
                "worker %s: the database goes through a transaction pooler and no session_dsn"
                " is set: no LISTEN, so new jobs are found by polling every %g s and"
                " cancellations every %g s; pruning runs without its lock. Set"
                " App(session_dsn=...) to a direct connection for instant wake-ups",
                self.name,
                self.poll_interval,
                max(0.05, self.poll_interval / 2),
                extra={"worker_id": worker_id},
            )
        self._services = self._new_services()
        for service in self._services:
            service.start()
        self._reporter.notify("worker_started", self)
        try:
            self._loop()
        finally:
            try:
                self._shutdown()
            finally:
                self._confirmations.drop()
                for signum, handler in previous_handlers.items():
                    signal.signal(signum, handler)
                self._stopped.set()

    async def arun(self) -> None:
        """Run the worker from an asyncio program: ``run()`` on a thread of its own while the
        awaiting task waits, so the event loop keeps serving.

        Cancelling the awaiting task stops the worker gracefully (:meth:`stop`: running jobs
        get ``shutdown_timeout`` seconds, the rest go back to pending), waits until it has
        stopped and deregistered, then re-raises ``CancelledError``; a second cancellation
        meanwhile releases the running jobs at once. An error of ``run()`` (an unmigrated
        schema, say) is raised here.
        """
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()

        def report(error: BaseException | None) -> None:
            if ended.done():
                return
            if error is None:
                ended.set_result(None)
            else:
                ended.set_exception(error)

        def run() -> None:
            error: BaseException | None = None
            try:
                self.run()
            except BaseException as failure:
                error = failure
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(report, error)

        thread = threading.Thread(target=run, name=f"pgtasks-worker-{self.name}", daemon=True)
        thread.start()
        try:
            await asyncio.shield(ended)
        except asyncio.CancelledError:
            self.stop(wait=False)
            while not ended.done():
                try:
                    await asyncio.shield(ended)
                except asyncio.CancelledError:
                    self.stop(0.0, wait=False)  # cancelled again: release running jobs now
                except BaseException:
                    break  # run() failed while stopping: the cancellation is what we report
            thread.join()  # it has returned from run(): it only ends
            raise
        thread.join()

    def _loop(self) -> None:
        exchanges = self._exchanges
        next_poll = 0.0
        failures = 0
        transient = 0
        exchanges.start_background(self._connect, self._wake_event.set)
        while not self._stop_requested.is_set():
            self._wake_event.clear()
            self._ledger.quiet = False
            try:
                exchanges.take_background()
                if failures or exchanges.recover_needed:
                    exchanges.settle_background(SHUTDOWN_WRITE_BOUND)
                    exchanges.recover_leases()
                    exchanges.recover_needed = False
                next_poll = self._step(next_poll)
                failures = transient = 0
                if not exchanges.recover_needed:
                    self._errors.recovered()
            except Exception as error:
                if not isinstance(error, psycopg.Error):
                    # Not the database: something one job brought (text that cannot be
                    # encoded, a bug). Find the outcome behind it and fail that job alone.
                    logger.exception("worker %s: unexpected error in the claim loop", self.name)
                    if self._ledger.unwritten:
                        try:
                            exchanges.write_one_by_one(error)
                            continue
                        except Exception as lost:
                            error = lost
                    if not isinstance(error, psycopg.Error):
                        # A claim's rows may be lost with it: release what we do not know
                        # we hold, then go on after a pause.
                        failures += 1
                        self._errors.failed(error)
                        exchanges.recover_needed = True
                        exchanges.maybe_more = True
                        self._wake_event.wait(reconnect_delay(failures))
                        continue
                if is_transient(error) and self._connection.usable:
                    # A lock timeout, a serialization failure, a deadlock (a workflow's
                    # next step held by another session, a REPEATABLE READ default): the
                    # round trip wrote nothing. Its outcomes stay unwritten and the same
                    # round trip is tried again after a pause; no outcome is replaced.
                    transient += 1
                    self._errors.failed(error)
                    exchanges.maybe_more = True
                    self._wake_event.wait(reconnect_delay(transient))
                    continue
                if self._connection.usable and self._ledger.unwritten:
                    # The server refused the batch itself (not the connection): find and
                    # fail the outcome it cannot store, so one bad job cannot stop the loop.
                    try:
                        exchanges.write_one_by_one(error)
                        continue
                    except Exception as lost:
                        # The connection was lost after all (a pipeline can fail before
                        # psycopg marks it broken): the outcomes not written are kept in
                        # the ledger; recover as from any connection failure.
                        error = lost
                failures += 1
                self._errors.failed(error)
                self._connection.drop()
                # The wake-up that led here was spent on a failed claim, and notifications
                # may be lost with the listener's connection: claim at once on recovery
                # instead of waiting for the next poll.
                exchanges.maybe_more = True
                self._wake_event.wait(reconnect_delay(failures))
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
            or exchanges.limited.due(now)
        )
        if claim and exchanges.claim_filter() is None:
            claim = False  # every queue of this worker is paused: claim once one resumes
        if exchanges.batch_more(free if claim else 0):
            claim = False  # the round trip in flight is back soon: batch up meanwhile
        elif claim:
            self._notified = False
            if now >= reporter.next_due:
                reporter.next_due = float("inf")
        if not claim and (not ledger.unwritten or exchanges.batch_more(0)):
            return next_poll
        if exchanges.lanes_full(now):
            # The first round trip back wakes the loop; the jobs that end meanwhile need not.
            ledger.quiet = True
            return next_poll
        limit = exchanges.share(free) if claim else 0
        claimed = exchanges.send(limit, now)
        if claimed is None:
            # Off the loop thread: step again at once, so another lane can claim the rest.
            self._wake_event.set()
        elif claim:
            exchanges.maybe_more = claimed == limit
        return time.monotonic() + self.poll_interval if claim else next_poll

    def _on_finished(self, running: Running, outcome: Outcome) -> None:
        """An attempt ended (on its thread, the event loop or the pool's supervisor): make
        its texts storable (escaped, capped, the password scrubbed), then hand it over."""
        self._prefetch.observe(time.monotonic() - running.started)
        try:
            outcome = storable_outcome(
                outcome, max_error_bytes=self.app.max_error_bytes, secrets=self._secrets
            )
        except Exception as error:  # the job's end is never lost
            outcome = Outcome(
                "failed",
                "failed",
                error=f"pgtasks could not store this attempt's outcome: {type(error).__name__}",
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
        limited_at = self._exchanges.limited.wake_at
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
        self._ledger.quiet = False  # the stop waits on each job's end
        GracefulStop(
            name=self.name,
            store=self.app.store,
            registration=self.registration,
            ledger=self._ledger,
            executor=self._executor,
            exchanges=self._exchanges,
            connection=self._connection,
            services=self._services,
            reporter=self._reporter,
            errors=self._errors,
            wake_event=self._wake_event,
            deadline=lambda: self._stop_deadline,
            store_counters=self.store_counters,
        ).run()
        self._reporter.notify("worker_stopped", self)
        logger.info("worker %s stopped (%s)", self.name, self._reporter.summary())
