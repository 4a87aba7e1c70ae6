"""The batch service of a worker (docs/howto/flow-control.md, "Batches"): it claims the
jobs of the app's batch tasks, up to each task's ``max_size`` at a time, waiting up to
its ``max_wait`` for more to fill a batch, calls the handler once per batch
(``pgtasks/_execution/batches.py``) and writes each job's outcome fenced by its own lease.

It runs on a thread and connection of its own, beside the claim loop (whose claims leave
batch tasks out, exchange.py): a batch takes no slot of the worker's concurrency. A
batch's outcomes are written by a writer thread (one, started with the first batch and
fed through a queue) on a second connection while the service claims (and runs) the
next batch: one batch's write at a time, the next batch's write waits for it, and a
stopping service waits for the last one. The
jobs it holds run under the worker's registration, so the heartbeat keeps them and, if
the worker dies, the rescuers return every one of them to pending; the ledger counts
them as held, so a lost claim reply never releases them.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from .._counters import BATCH_JOBS, BATCHES_RUN, FENCED_WRITES_REFUSED
from .._execution.batches import run_batch
from .._execution.joblogs import JobLogs
from .._execution.outcomes import storable_outcome
from .._leases import ClaimedJob, ClaimRequest, Finish
from .._retry import Outcome, reconnect_delay
from .connection import Connect, OwnConnection
from .services import Service

if TYPE_CHECKING:
    from .._app.app import App
    from .._app.tasks import Task
    from .._store.ports import WorkerPort
    from .exchange import Exchanges
    from .parts import LoopParts
    from .settings import WorkerSettings

logger = logging.getLogger("pgtasks.worker")

#: Seconds between the claims that fill a batch during its max_wait.
FILL_POLL = 0.05
#: Failed writes of a batch's outcomes a stopping worker tries before it leaves them
#: (its jobs are then rescued, as those of any worker that stopped).
STOPPING_WRITE_TRIES = 3

#: A batch handed to the writer: its task, jobs, outcomes and start time.
_Written = tuple["Task[Any, Any]", list[ClaimedJob], list[Outcome], float]

ClaimFilter = Callable[[], "tuple[tuple[str, ...] | None, tuple[str, ...] | None] | None"]


class BatchService(Service):
    """Claims, runs and finishes batches of the batch tasks given, one batch at a time."""

    name = "batches"

    def __init__(
        self,
        connect: Connect,
        settings: WorkerSettings,
        store: WorkerPort,
        tasks: Sequence[Task[Any, Any]],
        parts: LoopParts,
        *,
        claim_filter: ClaimFilter,
        secrets: Sequence[str],
    ) -> None:
        super().__init__(parts.name, connect, min(settings.poll_interval, 1.0))
        self.settings = settings
        self.registration = parts.registration
        self.store = store
        self.tasks = list(tasks)
        self.claim_filter = claim_filter
        self.ledger = parts.ledger
        self.reporter = parts.reporter
        self.secrets = list(secrets)
        #: The capture of the handlers' log lines (attached to each job of the batch).
        self._logs = (
            JobLogs(level=settings.executor.job_log_level) if settings.executor.job_logs else None
        )
        self._busy = False
        #: A claim failed (its reply may have been lost after it committed), and the jobs
        #: this service holds (a batch gathering or running).
        self._claim_failed = False
        self._held: set[int] = set()
        self._held_lock = threading.Lock()
        #: The writer of the batches' outcomes: its connection, its thread (started with
        #: the first batch; a thread per batch cost each batch the wait for the new
        #: thread to start), the batches it is handed, and the one it has not written yet
        #: (None: every batch handed to it is written, or given up).
        self._writer_connection = OwnConnection(connect)
        self._writer: threading.Thread | None = None
        self._writes: queue.SimpleQueue[_Written | None] = queue.SimpleQueue()
        self._written = threading.Condition()
        self._unwritten: _Written | None = None
        self._writer_ended = False

    def stop(self, timeout: float = 5.0) -> None:
        """Stop claiming; a batch running lets its handler end and its outcomes be written,
        for up to the worker's shutdown timeout (its jobs are rescued after that)."""
        timeout = max(timeout, self.settings.shutdown_timeout)
        ends = time.monotonic() + timeout
        super().stop(timeout)
        self._wait_for_write(max(0.0, ends - time.monotonic()))
        if self._writer is not None:
            self._writes.put(None)  # the writer ends after the batch it writes, if any
            self._writer.join(max(0.0, ends - time.monotonic()))
        self._writer_connection.drop()
        if self._logs is not None:
            self._logs.stop()

    def _wait_for_write(self, timeout: float | None = None) -> None:
        """Wait for the outcomes of the last batch to be written (or given up)."""
        if threading.current_thread() is self._writer:
            return
        with self._written:
            self._written.wait_for(lambda: self._unwritten is None, timeout)

    def _hand_to_writer(self, batch: _Written) -> None:
        """Queue ``batch``'s write (the previous one is written: _wait_for_write); start
        the writer first if there is none (the first batch, or one handed after a stop
        that timed out ended it)."""
        with self._written:
            self._unwritten = batch
            if self._writer is None or self._writer_ended:
                self._writer_ended = False
                self._writer = threading.Thread(
                    target=self._write_batches, name="pgtasks-batch-writer", daemon=True
                )
                self._writer.start()
            self._writes.put(batch)

    def _write_batches(self) -> None:
        """The writer thread: write each batch handed to it, in order, until told to end
        (stop()) with none left."""
        while True:
            batch = self._writes.get()
            if batch is None:
                with self._written:
                    if self._writes.empty():
                        self._writer_ended = True
                        return
                continue
            try:
                self._finish_batch(*batch)
            except Exception:  # a bug in reporting: the next batches are written all the same
                logger.exception("batch writer: a batch of task %s failed", batch[0].name)
            finally:
                with self._written:
                    if self._unwritten is batch:
                        self._unwritten = None
                    self._written.notify_all()

    def _next_wait(self) -> float:
        # Straight on after a batch: more jobs are likely due.
        return 0.0 if self._busy else super()._next_wait()

    def run_once(self, conn: psycopg.Connection[Any]) -> None:
        self._busy = False
        if self._claim_failed:
            self._release_orphans(conn)
        for task in self.tasks:
            if self.stopping.is_set():
                return
            jobs = self._gather(conn, task)
            if jobs:
                self._busy = True
                self._run_batch(task, jobs)
        if self.stopping.is_set():
            self._wait_for_write()

    def _claim(
        self, conn: psycopg.Connection[Any], task: Task[Any, Any], limit: int
    ) -> list[ClaimedJob]:
        worker_id = self.registration.worker_id
        claim_filter = self.claim_filter()
        if worker_id is None or claim_filter is None:  # not registered, or every queue paused
            return []
        queues, excluded = claim_filter
        request = ClaimRequest(
            worker_id=worker_id,
            limit=limit,
            queues=queues,
            excluded_queues=excluded,
            task_names=(task.name, *task.aliases),
        )
        try:
            jobs = self.store.claim_jobs(conn, request)
        except psycopg.Error:
            self._claim_failed = True  # it may have committed: see _release_orphans
            raise
        self.ledger.hold_elsewhere([job.id for job in jobs])
        with self._held_lock:
            self._held.update(job.id for job in jobs)
        return jobs

    def _release_orphans(self, conn: psycopg.Connection[Any]) -> None:
        """After a failed claim: release the jobs of its tasks it may have claimed (their
        reply lost with the connection), which no batch of this worker holds."""
        worker_id = self.registration.worker_id
        if worker_id is None:
            return
        names = [name for task in self.tasks for name in (task.name, *task.aliases)]
        with self._held_lock:  # a batch being written holds its jobs until it is written
            known = sorted(self._held)
        released = self.store.release_orphaned_batch_jobs(
            conn, worker_id=worker_id, task_names=names, known_ids=known
        )
        self._claim_failed = False
        if released:
            logger.warning(
                "worker %s: released %d batch job(s) claimed by a reply lost with the"
                " connection: %s",
                self.owner,
                len(released),
                ", ".join(str(job_id) for job_id in sorted(released)),
            )

    def _gather(self, conn: psycopg.Connection[Any], task: Task[Any, Any]) -> list[ClaimedJob]:
        """Up to max_size due jobs: those due now, then more for up to max_wait."""
        batch = task.batch
        if batch is None:
            return []
        jobs = self._claim(conn, task, batch.max_size)
        if not jobs:
            return jobs
        deadline = time.monotonic() + batch.max_wait.total_seconds()
        while len(jobs) < batch.max_size and not self.stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.stopping.wait(min(left, FILL_POLL))
            try:
                jobs += self._claim(conn, task, batch.max_size - len(jobs))
            except psycopg.Error as error:  # run the jobs held; the next pass reconnects
                logger.warning("batch claim of task %s failed: %s", task.name, error)
                self.connection.drop()
                break
        return jobs

    def _run_batch(self, task: Task[Any, Any], jobs: list[ClaimedJob]) -> None:
        started = time.monotonic()
        if self._logs is not None and not self._logs.started and not self.stopping.is_set():
            self._logs.start(tuple(self.secrets))
        try:
            outcomes = run_batch(task, jobs, self._logs)
        except BaseException as error:  # the jobs' ends are never lost
            logger.exception("batch of task %s could not run", task.name)
            outcomes = [Outcome.failed(f"pgtasks could not run the batch: {error!r}")] * len(jobs)
        # The previous batch's write ends first (one write at a time, in batch order);
        # this one's (its finishes made on the writer's thread) overlaps the claim of the
        # next batch.
        self._wait_for_write()
        self._hand_to_writer((task, jobs, outcomes, started))

    def _finishes(self, jobs: list[ClaimedJob], outcomes: list[Outcome]) -> list[Finish]:
        """The finish of each job's attempt; each distinct outcome made storable once
        (most jobs of a batch share one: done, result None)."""
        storable: dict[int, Outcome] = {}
        finishes = []
        for job, outcome in zip(jobs, outcomes, strict=True):
            clean = storable.get(id(outcome))
            if clean is None:
                clean = storable[id(outcome)] = self._storable(outcome)
            finishes.append(Finish.of(job, clean))
        return finishes

    def _finish_batch(
        self, task: Task[Any, Any], jobs: list[ClaimedJob], outcomes: list[Outcome], started: float
    ) -> None:
        """Write a batch's outcomes (the writer thread), then release and report its jobs."""
        try:
            written = self._write(self._finishes(jobs, outcomes))
        except BaseException:  # never lost silently: the jobs are rescued as a dead lease
            logger.exception("outcomes of a batch of task %s not written", task.name)
            written = None
        self.ledger.release_elsewhere([job.id for job in jobs])
        with self._held_lock:
            self._held.difference_update(job.id for job in jobs)
        kinds: dict[str, int] = {}
        for outcome in outcomes:
            kinds[outcome.kind] = kinds.get(outcome.kind, 0) + 1
        refused = len(jobs) - len(written) if written is not None else 0
        duration = time.monotonic() - started
        for job, outcome in zip(jobs, outcomes, strict=True):
            self.reporter.notify("job_finished", job, outcome.kind, duration)
        self.reporter.notify("batch_finished", task.name, len(jobs), duration)
        self.reporter.exercised(BATCHES_RUN)
        self.reporter.exercised(BATCH_JOBS, len(jobs))
        self.reporter.exercised(FENCED_WRITES_REFUSED, refused)
        logger.info(
            "batch of task %s: %d job(s) in %.3f s (%s)%s",
            task.name,
            len(jobs),
            duration,
            ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items())),
            f"; {refused} outcome(s) refused by the lease fence" if refused else "",
        )

    def _storable(self, outcome: Outcome) -> Outcome:
        try:
            return storable_outcome(
                outcome, max_error_bytes=self.settings.max_error_bytes, secrets=self.secrets
            )
        except Exception as error:
            return Outcome.failed(
                f"pgtasks could not store this attempt's outcome: {type(error).__name__}"
            )

    def _write(self, finishes: list[Finish]) -> dict[int, str] | None:
        """Write the outcomes, fenced, retrying on a new connection while the worker runs;
        None when a stopping worker gave up (the jobs are rescued once it is gone)."""
        failures = 0
        while True:
            try:
                return self.store.finish_jobs(self._writer_connection.get(), finishes)
            except psycopg.Error as error:
                failures += 1
                self._writer_connection.drop()
                if self.stopping.is_set() and failures >= STOPPING_WRITE_TRIES:
                    logger.error(
                        "cannot write the outcomes of a batch of %d job(s) (%s); they will"
                        " be rescued",
                        len(finishes),
                        error,
                    )
                    return None
                logger.warning("batch outcomes not written (%s); trying again", error)
                time.sleep(min(reconnect_delay(failures), 5.0))


def batch_services(
    app: App,
    connect: Connect,
    settings: WorkerSettings,
    parts: LoopParts,
    exchanges: Exchanges,
    secrets: Sequence[str],
) -> list[Service]:
    """The batch service of the app's batch tasks (none without any)."""
    tasks = sorted(
        {task for task in app.tasks.values() if task.batch is not None}, key=lambda t: t.name
    )
    if not tasks:
        return []
    service = BatchService(
        connect,
        settings,
        app.queries,
        tasks,
        parts,
        claim_filter=exchanges.claim_filter,
        secrets=secrets,
    )
    return [service]
