"""Worker: the claim loop, slots, wake-ups, fenced completions and graceful shutdown.

One thread runs the loop below on its own connection; jobs run on the Executor;
Heartbeat, Rescuer and Listener run beside it (see _services). The round trips that
write outcomes and claim jobs are in _worker_exchange (WorkerExchange), the graceful
stop and signal handling in _worker_shutdown (WorkerShutdown): mixins of Worker.

    loop:  write finished outcomes (one fenced statement per batch)
           time out sync attempts past their deadline
           claim up to the free slots (one statement, FOR UPDATE SKIP LOCKED)
           wait for: a finished job, a notification, the poll interval, stop()
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import psycopg

from .._app.loading import load_app
from .._errors import ConfigurationError
from .._execution.executor import Executor, ExecutorOptions, PoolName, Running
from .._execution.outcomes import storable_outcome
from .._execution.process_pool import StartMethod
from .._payload import check_name
from .._retry import Outcome
from .._store.db import dsn_secrets
from .._store.store import ClaimPosition
from .._text import storable
from .background import BackgroundExchanger
from .events import WorkerEvents
from .exchange import FULL_CLAIM_SHARE as FULL_CLAIM_SHARE
from .exchange import MAX_FULL_CLAIM_SPACING as MAX_FULL_CLAIM_SPACING
from .exchange import WorkerExchange
from .pruner import Pruner
from .services import ErrorLog, Heartbeat, Listener, Rescuer, Service, connect
from .shutdown import HARD_EXIT_MARGIN as HARD_EXIT_MARGIN
from .shutdown import SHUTDOWN_WRITE_BOUND as SHUTDOWN_WRITE_BOUND
from .shutdown import WorkerShutdown

if TYPE_CHECKING:
    from .._app.app import App

logger = logging.getLogger("pgtasks.worker")

MAX_BACKOFF = 2.0
#: Seconds the loop waits for more completions before writing a small batch.
LINGER = 0.001


def _seconds(name: str, value: float | None, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigurationError(f"{name}= must be a number of seconds >= 0, got {value!r}")
    return float(value)


class Worker(WorkerExchange, WorkerShutdown):
    """Claims and runs jobs of ``queues`` (None: every queue) until stopped.

    ``run()`` blocks; ``stop()`` (thread-safe) stops claiming, lets running jobs finish
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
        ignore_unknown: bool = False,
        prefetch: int = 0,
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
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigurationError(f"concurrency= must be an int >= 1, got {concurrency!r}")
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
        self.ignore_unknown = ignore_unknown
        self._task_names: list[str] | None = None
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ConfigurationError(f"prefetch= must be an int >= 0, got {prefetch!r}")
        #: Jobs claimed beyond the free slots, waiting in this worker to start as slots free
        #: up: the next batch's round trip overlaps the current one's work. They are held
        #: (leased and heartbeated) while other workers might be idle: keep it for short jobs.
        self.prefetch = prefetch
        self.observers: list[WorkerEvents] = list(observers)
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        self.name = f"{self.hostname}:{self.pid}"
        #: The current registration id (the lease owner of new claims); None until run().
        self.worker_id: int | None = None
        self._id_lock = threading.Lock()
        self._reregister_lock = threading.Lock()
        self._wake_event = threading.Event()
        self._notified = True  # claim at once on start
        self._finished: queue.SimpleQueue[tuple[Running, Outcome]] = queue.SimpleQueue()
        self._in_flight: dict[int, Running] = {}
        self._unwritten: list[tuple[Running, Outcome]] = []
        self._stop_requested = threading.Event()
        self._stop_deadline: float | None = None
        self._stopped = threading.Event()
        self._run_thread: threading.Thread | None = None
        self._conn: psycopg.Connection[Any] | None = None
        #: The listener thread's connection to confirm cancel notifications (opened lazily).
        self._confirm_conn: psycopg.Connection[Any] | None = None
        self._errors = ErrorLog(f"claim loop of worker {self.name}")
        self._maybe_more = True
        #: Where the last claim stopped (claim order), and when the next claim must read
        #: from the start again: between those, claims read on from the position instead
        #: of walking the index entries of jobs already claimed (see claim_jobs_after).
        self._position: ClaimPosition | None = None
        self._next_full_claim = 0.0
        #: The second round trip in flight (see _exchange.py), the number of jobs it is
        #: claiming, whether a lost reply of it may have left claims to recover, and until
        #: when it rests after its connection failed.
        self._background: BackgroundExchanger | None = None
        self._claiming = 0
        self._recover_needed = False
        self._background_rest_until = 0.0
        #: time.monotonic() when a job we rescheduled becomes due (claim then, not at the poll).
        self._next_due = float("inf")
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
        self._services: list[Service] = []
        #: The forms of the connection password, scrubbed from every error text written.
        self._secrets: tuple[str, ...] = ()
        #: Counters since start (read by tests and the demo).
        self.counts: dict[str, int] = {}

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
    def running_jobs(self) -> int:
        return len(self._in_flight)

    @property
    def child_pids(self) -> list[int]:
        """Pids of the process pool's children serving jobs (empty without a pool)."""
        return self._executor.process_pids()

    def wake(self, *, notified: bool = False) -> None:
        if notified:
            self._notified = True
        self._wake_event.set()

    # -- registration (also called by the services) --
    def _register(self, conn: psycopg.Connection[Any]) -> int:
        worker_id = self.app.store.register_worker(
            conn,
            hostname=self.hostname,
            pid=self.pid,
            queues=self.queues,
            concurrency=self.concurrency,
        )
        with self._id_lock:
            self.worker_id = worker_id
        return worker_id

    def heartbeat(self, conn: psycopg.Connection[Any]) -> None:
        worker_id = self.worker_id
        if worker_id is None or self._stopped.is_set():
            return
        if self.app.store.heartbeat_worker(conn, worker_id):
            return
        with self._reregister_lock:
            # The heartbeat and the rescuer both get here: only the first re-registers.
            if self.worker_id != worker_id or self._stop_requested.is_set():
                return
            new_id = self._register(conn)
        logger.warning(
            "worker %s: registration %d was removed (presumed dead after %g s without a"
            " heartbeat); re-registered as %d. Jobs it held may have been rescued; their late"
            " outcomes will be discarded.",
            self.name,
            worker_id,
            self.lease_timeout,
            new_id,
            extra={"worker_id": new_id},
        )

    def cancel_jobs(self, job_ids: set[int]) -> None:
        """A cancel notification named these jobs (the listener's thread).

        A notification is only a hint: any role may send one on the channel. A job running
        here is cancelled once its row confirms ``cancel_requested``; on a database error
        the heartbeat's poll (:meth:`poll_cancel_requests`) confirms it later.
        """
        if not any(running.job.id in job_ids for running in list(self._in_flight.values())):
            return
        worker_id = self.worker_id
        if worker_id is None:
            return
        try:
            if self._confirm_conn is None or self._confirm_conn.closed:
                self._confirm_conn = connect(self)
            requested = self.app.store.get_cancel_requests(self._confirm_conn, worker_id)
        except psycopg.Error as error:
            conn, self._confirm_conn = self._confirm_conn, None
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    conn.close()
            logger.warning(
                "worker %s: cannot confirm a cancellation (%s); the heartbeat will",
                self.name,
                error,
            )
            return
        self._cancel_confirmed(requested & job_ids)

    def _cancel_confirmed(self, job_ids: set[int]) -> None:
        """Ask running attempts of these jobs (cancel_requested on their rows) to stop."""
        for running in list(self._in_flight.values()):
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
        if worker_id is None or not self._in_flight:
            return
        requested = self.app.store.get_cancel_requests(conn, worker_id)
        if requested:
            self._cancel_confirmed(requested)

    def rescue(self, conn: psycopg.Connection[Any]) -> None:
        store = self.app.store
        rescued = store.rescue_jobs(conn, lease_timeout=self.lease_timeout)
        for row in rescued:
            logger.warning(
                "rescued job %d (attempt %d) from lost worker %s: now %s",
                row["id"],
                row["attempts"],
                row["locked_by"],
                row["status"],
                extra={"job_id": row["id"], "attempt": row["attempts"]},
            )
        for row in store.delete_dead_workers(conn, lease_timeout=self.lease_timeout):
            logger.warning(
                "removed registration of dead worker %d (%s:%d)",
                row["id"],
                row["hostname"],
                row["pid"],
            )
        for queue_name in {row["queue"] for row in rescued if row["status"] == "pending"}:
            store.notify_queue(conn, queue_name)
        store.notify_done(conn, [row["id"] for row in rescued if row["status"] != "pending"])
        self._count("rescued", len(rescued))

    def _new_executor(self) -> Executor:
        return Executor(
            self.app, self._executor_options, on_finished=self._on_finished, app_loader=load_app
        )

    # -- the loop --
    def run(self, *, install_signal_handlers: bool = False) -> None:
        """Run until stopped. Raises SchemaNotMigratedError before claiming on an old schema."""
        self._run_thread = threading.current_thread()
        try:
            self.app.check_schema()
            self._secrets = dsn_secrets(self.app.dsn)
            self._executor = self._new_executor()
            self._executor.start()  # process pool children import the app before any claim
            try:
                self._conn = connect(self)
                worker_id = self._register(self._conn)
            except BaseException:
                self._executor.shutdown()
                raise
        except BaseException:
            self._stopped.set()  # stop() must not wait for a worker that never started
            raise
        previous_handlers = self._install_signal_handlers() if install_signal_handlers else {}
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
        self._services = [
            Heartbeat(self, self.heartbeat_interval),
            Rescuer(self, self.rescue_interval),
            Listener(self),
            Pruner(self, self.app.prune_interval),
        ]
        for service in self._services:
            service.start()
        self._notify("worker_started", self)
        try:
            self._loop()
        finally:
            try:
                self._shutdown()
            finally:
                confirm, self._confirm_conn = self._confirm_conn, None
                if confirm is not None:
                    with contextlib.suppress(psycopg.Error):
                        confirm.close()
                for signum, handler in previous_handlers.items():
                    signal.signal(signum, handler)
                self._stopped.set()

    def _loop(self) -> None:
        next_poll = 0.0
        failures = 0
        if self._executor.capacity + self.prefetch >= 2:
            self._background = BackgroundExchanger(
                lambda: connect(self),
                self._run_exchange,
                self._wake_event.set,
                name=f"pgtasks-exchange-{self.name}",
            )
        while not self._stop_requested.is_set():
            self._wake_event.clear()
            try:
                self._take_background()
                if failures or self._recover_needed:
                    self._settle_background()
                    self._recover_leases()
                    self._recover_needed = False
                next_poll = self._step(next_poll)
                failures = 0
                if not self._recover_needed:
                    self._errors.recovered()
            except Exception as error:
                if not isinstance(error, psycopg.Error):
                    # Not the database: something one job brought (text that cannot be
                    # encoded, a bug). Find the outcome behind it and fail that job alone.
                    logger.exception("worker %s: unexpected error in the claim loop", self.name)
                    if self._unwritten:
                        try:
                            self._write_one_by_one(error)
                            continue
                        except Exception as lost:
                            error = lost
                    if not isinstance(error, psycopg.Error):
                        # A claim's rows may be lost with it: release what we do not know
                        # we hold, then go on after a pause.
                        failures += 1
                        self._errors.failed(error)
                        self._recover_needed = True
                        self._maybe_more = True
                        self._wake_event.wait(min(MAX_BACKOFF, 0.05 * 2**failures))
                        continue
                if self._conn is not None and not self._conn.broken and self._unwritten:
                    # The server refused the batch itself (not the connection): find and
                    # fail the outcome it cannot store, so one bad job cannot stop the loop.
                    try:
                        self._write_one_by_one(error)
                        continue
                    except Exception as lost:
                        # The connection was lost after all (a pipeline can fail before
                        # psycopg marks it broken): the outcomes not written are kept in
                        # _unwritten; recover as from any connection failure.
                        error = lost
                failures += 1
                self._errors.failed(error)
                self._drop_connection()
                # The wake-up that led here was spent on a failed claim, and notifications
                # may be lost with the listener's connection: claim at once on recovery
                # instead of waiting for the next poll.
                self._maybe_more = True
                self._wake_event.wait(min(MAX_BACKOFF, 0.05 * 2**failures))
                continue
            self._wake_event.wait(self._wait_time(next_poll))

    def _step(self, next_poll: float) -> float:
        """Collect outcomes; write them and claim when there is reason to. Returns the
        time of the next poll."""
        self._collect()
        self._linger()
        self._expire()
        now = time.monotonic()
        free = self._executor.capacity + self.prefetch - len(self._in_flight) - self._claiming
        due = now >= next_poll or now >= self._next_due
        claim = free > 0 and (self._notified or self._maybe_more or due)
        if self._batch_more(free if claim else 0):
            claim = False  # the round trip in flight is back soon: batch up meanwhile
        elif claim:
            self._notified = False
            if now >= self._next_due:
                self._next_due = float("inf")
        if not claim and (not self._unwritten or self._batch_more(0)):
            return next_poll
        limit = free if claim else 0
        background = self._background
        if background is not None and self._can_overlap(now):
            # Busy: start this round trip on the second connection and go on; its result
            # is applied when it is back (_take_background).
            background.submit(self._prepare_exchange(limit))
            self._claiming = limit
        else:
            claimed = self._exchange(limit)
            if claim:
                self._maybe_more = claimed == limit
        return time.monotonic() + self.poll_interval if claim else next_poll

    def _write_one_by_one(self, batch_error: Exception) -> None:
        batch, self._unwritten = self._unwritten, []
        for index, (running, outcome) in enumerate(batch):
            self._unwritten = [(running, outcome)]
            try:
                self._exchange(0)
                continue
            except Exception as error:
                if isinstance(error, psycopg.Error) and (self._conn is None or self._conn.broken):
                    self._unwritten = batch[index:]
                    raise
                replacement = Outcome(
                    "failed",
                    "failed",
                    error=storable(
                        f"pgtasks could not record this attempt's outcome ({outcome.kind}):"
                        f" {type(error).__name__}: {error}"
                    ),
                )
            self._unwritten = [(running, replacement)]
            try:
                self._exchange(0)
            except Exception:
                self._unwritten = []
                logger.exception(
                    "job %d: cannot record any outcome (%s); it will be rescued",
                    running.job.id,
                    batch_error,
                )

    def _linger(self) -> None:
        """With most slots still busy and few outcomes ready, wait a moment for more.

        Writing outcomes costs one round trip whatever their number: a millisecond of
        patience turns a trickle of single completions into batches.
        """
        busy = len(self._in_flight)
        capacity = self._executor.capacity
        if self._unwritten and busy and len(self._unwritten) < busy and busy * 2 > capacity:
            time.sleep(LINGER)
            self._collect()

    def _wait_time(self, next_poll: float) -> float:
        now = time.monotonic()
        wait = max(0.0, min(next_poll, self._next_due) - now)
        if self._background is not None and self._background.busy:
            # A poll or a due retry waits for the round trip in flight: its return wakes
            # the loop (and a claim right after it reads from the start if due).
            wait = self.poll_interval
        for running in self._in_flight.values():
            if running.deadline is not None and not running.abandoned:
                wait = min(wait, max(0.0, running.deadline - now))
        return wait

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self)
        return self._conn

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def _recover_leases(self) -> None:
        """After a connection failure: release jobs we claimed but never received.

        A claim can commit and its reply be lost with the connection; those jobs are
        running under our (heartbeating) registration, so no rescuer would free them.
        """
        worker_id = self.worker_id
        if worker_id is None:
            return
        self._collect()
        # Jobs still running here, and finished ones whose outcome is not written yet.
        known = [running.job.id for running in self._in_flight.values()]
        known += [running.job.id for running, _ in self._unwritten]
        released = self.app.store.release_orphaned_jobs(
            self._connection(), worker_id=worker_id, known_ids=known
        )
        if released:
            logger.warning(
                "worker %s: released %d job(s) claimed by a reply lost with the connection: %s",
                self.name,
                len(released),
                ", ".join(str(job_id) for job_id in sorted(released)),
            )

    def _on_finished(self, running: Running, outcome: Outcome) -> None:
        """Called on the job's thread (or the event loop): hand over to the loop."""
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
        self._finished.put((running, outcome))
        if not self._wake_event.is_set():  # spare the lock when the loop is already awake
            self._wake_event.set()

    def _expire(self) -> None:
        now = time.monotonic()
        for running in list(self._in_flight.values()):
            if running.deadline is not None and not running.abandoned and now >= running.deadline:
                self._unwritten.append((running, self._executor.expire(running)))

    def _collect(self) -> None:
        """Move finished attempts from the queue; free their slots."""
        while True:
            try:
                running, outcome = self._finished.get_nowait()
            except queue.Empty:
                return
            self._in_flight.pop(running.token, None)
            if running.abandoned:
                logger.debug(
                    "job %d: abandoned attempt %d returned", running.job.id, running.job.attempt
                )
                continue
            self._unwritten.append((running, outcome))

    def _write_outcomes(self) -> None:
        """Write every finished outcome, fenced (used while stopping)."""
        self._collect()
        if self._unwritten:
            self._exchange(0)

    def _after_write(self, batch: list[tuple[Running, Outcome]], accepted: dict[int, str]) -> None:
        for running, outcome in batch:
            written = running.job.id in accepted
            if written and accepted[running.job.id] == "cancelled":
                outcome = Outcome("cancelled", "failed", error=outcome.error)
            self._log_outcome(running, outcome, written=written)
            if outcome.status == "pending" and written:
                # A retry due before the next poll: claim it on time.
                self._next_due = min(self._next_due, time.monotonic() + outcome.delay)

    def _log_outcome(self, running: Running, outcome: Outcome, *, written: bool) -> None:
        job = running.job
        extra = {
            "job_id": job.id,
            "task": job.task_name,
            "attempt": job.attempt,
            "worker_id": job.worker_id,
            "outcome": outcome.kind,
        }
        duration = time.monotonic() - running.started
        if not written:
            self._count("lease_lost")
            logger.warning(
                "job %d %s attempt %d: lease lost (the job was rescued or released meanwhile);"
                " outcome %s discarded",
                job.id,
                job.task_name,
                job.attempt,
                outcome.summary,
                extra=extra,
            )
            return
        self._count(outcome.kind)
        self._notify("job_finished", job, outcome.kind, duration)
        level = logging.INFO if outcome.kind in ("done", "retry") else logging.WARNING
        first_line = ""
        if outcome.error and outcome.kind != "done":
            first_line = ": " + outcome.error.strip().splitlines()[-1][:200]
        logger.log(
            level,
            "job %d %s attempt %d/%d %s in %.3f s%s",
            job.id,
            job.task_name,
            job.attempt,
            job.max_attempts,
            outcome.summary,
            duration,
            first_line,
            extra=extra,
        )

    def _notify(self, event: str, *arguments: Any) -> None:
        for observer in self.observers:
            try:
                getattr(observer, event)(*arguments)
            except Exception:
                logger.exception("worker observer %r failed on %s", observer, event)

    def _count(self, name: str, amount: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + amount
