"""Cancellation of running jobs (Cancellations): a cancel notification, or the
heartbeat's poll, asks the executor to stop the attempts whose rows say
``cancel_requested``; a termination requested for the attempt running here under this
worker's lease (meta "pgtasks.terminate") has the executor kill it instead (see
Executor.terminate): a request for another attempt or owner is a cancel only.

A notification is only a hint: any role may send one on the channel. A job running
here is cancelled once its row confirms ``cancel_requested``; on a database error the
heartbeat's poll (:meth:`Cancellations.poll`) confirms it later.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import psycopg

from .connection import Connect, OwnConnection

if TYPE_CHECKING:
    from .._execution.executor import Executor
    from .._store.ports import WorkerPort
    from .ledger import JobLedger
    from .registration import Registration

logger = logging.getLogger("pgtasks.worker")


class Cancellations:
    """Confirms cancel requests of this worker's jobs and passes them to the executor."""

    def __init__(
        self,
        connect: Connect,
        *,
        store: WorkerPort,
        registration: Registration,
        ledger: JobLedger,
        executor: Executor,
    ) -> None:
        self.queries = store
        self.registration = registration
        self.ledger = ledger
        self.executor = executor
        #: The listener thread's connection to confirm notifications (opened lazily).
        self.confirmations = OwnConnection(connect)

    def notified(self, job_ids: set[int]) -> None:
        """A cancel notification named these jobs (the listener's thread)."""
        in_flight = list(self.ledger.in_flight.values())
        if not any(running.job.id in job_ids for running in in_flight):
            return
        worker_id = self.registration.worker_id
        if worker_id is None:
            return
        try:
            requested = self.queries.get_cancel_requests(self.confirmations.get(), worker_id)
        except psycopg.Error as error:
            self.confirmations.drop()
            logger.warning(
                "worker %s: cannot confirm a cancellation (%s); the heartbeat will",
                self.registration.name,
                error,
            )
            return
        self._confirmed({job_id: requested[job_id] for job_id in requested.keys() & job_ids})

    def poll(self, conn: psycopg.Connection[Any]) -> None:
        """Heartbeat-time check for cancellations whose notification was missed."""
        worker_id = self.registration.worker_id
        if worker_id is None or not self.ledger.in_flight:
            return
        requested = self.queries.get_cancel_requests(conn, worker_id)
        if requested:
            self._confirmed(requested)
        self.flush_logs(conn, worker_id)

    def flush_logs(self, conn: psycopg.Connection[Any], worker_id: int) -> None:
        """Write the log lines of running attempts that logged since the last beat (the
        job page shows them while the attempt runs; its end writes them all)."""
        logs = []
        for running in list(self.ledger.in_flight.values()):
            log, job = running.log, running.job
            if log is not None and job.worker_id == worker_id:
                text = log.unflushed()
                if text is not None:
                    logs.append((job.id, job.attempt, text))
        self.queries.update_job_logs(conn, worker_id, logs)

    def _confirmed(self, requests: dict[int, int | None]) -> None:
        """Ask running attempts of these jobs (cancel_requested on their rows) to stop;
        ``requests``: job id -> the attempt a termination names (None: none)."""
        for running in list(self.ledger.in_flight.values()):
            job = running.job
            if job.id not in requests:
                continue
            terminate = requests[job.id] == job.attempt
            if terminate and not running.terminate_requested:
                logger.info(
                    "job %d %s attempt %d: termination requested (%s executor)",
                    job.id,
                    job.task_name,
                    job.attempt,
                    running.executor or "no",
                    extra={"job_id": job.id, "task": job.task_name},
                )
                self.executor.terminate(running)
            elif not terminate and not running.cancel_requested:
                logger.info(
                    "job %d %s attempt %d: cancellation requested",
                    job.id,
                    job.task_name,
                    job.attempt,
                    extra={"job_id": job.id, "task": job.task_name},
                )
                self.executor.cancel(running)

    def close(self) -> None:
        self.confirmations.drop()
