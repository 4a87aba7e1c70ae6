"""What a worker tells about its jobs: log lines, counters, observer events (Reporter).

One place for the outcome log line (job id, task, attempt, duration, outcome), the
``lease lost`` warning of a fenced-out outcome, the counters ``Worker.counts`` exposes,
and the calls of the worker's observers (``WorkerEvents``), which may fail without
harming the worker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._counters import FENCED_WRITES_REFUSED, LEASE_LOST, UNKNOWN_TASK_JOBS, Tally
from .._execution.outcomes import UNKNOWN_TASK_ERROR
from .._instrumentation import outcome_name
from .._retry import Outcome

if TYPE_CHECKING:
    import psycopg

    from .._execution.running import Running
    from .._store.queries import Queries
    from .events import WorkerEvents
    from .worker import Worker

logger = logging.getLogger("pgtasks.worker")


class Reporter:
    """Logs, counts and notifies observers for one worker."""

    @staticmethod
    def banner(worker: Worker, worker_id: int) -> None:
        """The line a worker logs once registered (and a warning without LISTEN)."""
        logger.info(
            "worker %d (%s) started: queues=%s concurrency=%d executors=%s database=%s"
            " lease=%gs heartbeat=%gs rescue=%gs poll=%gs",
            worker_id,
            worker.name,
            ",".join(worker.queues) if worker.queues else "*",
            worker.concurrency,
            worker.executor_description,
            worker.app.describe_database(),
            worker.lease_timeout,
            worker.heartbeat_interval,
            worker.rescue_interval,
            worker.poll_interval,
            extra={"worker_id": worker_id},
        )
        if not worker.app.database.has_session:
            logger.warning(
                "worker %s: the database goes through a transaction pooler and no session_dsn"
                " is set: no LISTEN, so new jobs are found by polling every %g s and"
                " cancellations every %g s; pruning runs without its lock. Set"
                " App(session_dsn=...) to a direct connection for instant wake-ups",
                worker.name,
                worker.poll_interval,
                worker.settings.paused_refresh,
                extra={"worker_id": worker_id},
            )

    def __init__(self, observers: Sequence[WorkerEvents]) -> None:
        self.observers: list[WorkerEvents] = list(observers)
        #: Counters since start (read by tests and the demo).
        self.counts: dict[str, int] = {}
        #: time.monotonic() when a job we rescheduled becomes due (claim then, not at the poll).
        self.next_due = float("inf")
        #: The counters of exercised guarantees (pgtasks._counters) this worker counted:
        #: added to the database with the heartbeat, and told to observers at once.
        self.tally = Tally()

    def due_claimed(self) -> None:
        """A claim ran at or after ``next_due``: the jobs due then are claimed."""
        self.next_due = float("inf")

    def store_counters(self, store: Queries, conn: psycopg.Connection[Any]) -> None:
        """Add what the tally counted since the last call to the database's counters
        (what fails to be stored is kept for the next call)."""
        counts = self.tally.unstored()
        if not counts:
            return
        try:
            store.add_counters(conn, counts)
        except BaseException:
            self.tally.give_back(counts)
            raise

    def count(self, name: str, amount: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + amount

    def exercised(self, name: str, amount: int = 1, *, store: bool = True) -> None:
        """A guarantee was exercised ``amount`` times (any thread): counted in the tally
        (stored with the next heartbeat unless ``store=False``: the statement that did
        it counted it in the database already) and told to the observers."""
        if amount <= 0:
            return
        self.tally.add(name, amount, store=store)
        self.notify("counted", name, amount)

    def refused(self, running: Running, amount: int = 1) -> None:
        """The lease fence refused ``amount`` writes of an attempt: its lease is lost
        (counted once per attempt)."""
        self.exercised(FENCED_WRITES_REFUSED, amount)
        if running.lose_lease():
            self.exercised(LEASE_LOST)

    def notify(self, event: str, *arguments: Any) -> None:
        for observer in self.observers:
            try:
                getattr(observer, event)(*arguments)
            except Exception:
                logger.exception("worker observer %r failed on %s", observer, event)

    def summary(self) -> str:
        return ", ".join(f"{name}={count}" for name, count in sorted(self.counts.items())) or "idle"

    def written(self, batch: list[tuple[Running, Outcome]], accepted: Mapping[int, str]) -> None:
        """Outcomes a round trip wrote (``accepted``: id → status stored) or fenced out."""
        if not self.observers and not logger.isEnabledFor(logging.INFO):
            self._count_quietly(batch, accepted)
            return
        for running, outcome in batch:
            written = running.job.id in accepted
            if written and accepted[running.job.id] == "cancelled":
                outcome = Outcome.cancelled(outcome.error)
            self._log_outcome(running, outcome, written=written)
            if running.trace is not None:
                self._end_trace(running, outcome, written)
            if outcome.status == "pending" and written:
                # A retry due before the next poll: claim it on time.
                self.next_due = min(self.next_due, time.monotonic() + outcome.delay)

    @staticmethod
    def _end_trace(running: Running, outcome: Outcome, written: bool) -> None:
        """End the attempt's trace now that its outcome is written (or fenced out)."""
        trace = running.trace
        if trace is None:
            return
        try:
            trace.end(outcome_name(outcome, written=written), outcome.error)
        except Exception:
            logger.exception("job %d: ending its trace failed", running.job.id)

    def _count_quietly(
        self, batch: list[tuple[Running, Outcome]], accepted: Mapping[int, str]
    ) -> None:
        """written() with no observer and no INFO log line: the counts, the WARNING lines
        (which may be enabled alone) and the due time of retries, without the per-job
        log record."""
        counts = self.counts
        for running, outcome in batch:
            status = accepted.get(running.job.id)
            if status is None or status == "cancelled" or outcome.kind not in ("done", "retry"):
                # Lease lost, cancelled, failed: rare; the full path logs them.
                if status == "cancelled":
                    outcome = Outcome.cancelled(outcome.error)
                self._log_outcome(running, outcome, written=status is not None)
            else:
                counts[outcome.kind] = counts.get(outcome.kind, 0) + 1
                if outcome.exception_type == UNKNOWN_TASK_ERROR:
                    self.exercised(UNKNOWN_TASK_JOBS)  # released, not failed
            if running.trace is not None:
                self._end_trace(running, outcome, status is not None)
            if outcome.status == "pending" and status is not None:
                self.next_due = min(self.next_due, time.monotonic() + outcome.delay)

    def _log_outcome(self, running: Running, outcome: Outcome, *, written: bool) -> None:
        job = running.job
        extra: dict[str, Any] = {
            "job_id": job.id,
            "task": job.task_name,
            "attempt": job.attempt,
            "worker_id": job.worker_id,
            "outcome": outcome.kind,
        }
        if running.trace is not None:
            try:
                extra.update(running.trace.log_fields())
            except Exception:  # an integration's bug must not stop the worker's logging
                logger.exception("job %d: reading its trace ids failed", job.id)
        duration = time.monotonic() - running.started
        if not written:
            self.count("lease_lost")
            self.refused(running)
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
        self.count(outcome.kind)
        if outcome.exception_type == UNKNOWN_TASK_ERROR:
            self.exercised(UNKNOWN_TASK_JOBS)  # a job of a task it could not run, released
        self.notify("job_finished", job, outcome.kind, duration)
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
