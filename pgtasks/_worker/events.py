"""Hooks a worker calls as jobs start and end: metrics and tests subscribe here.

Pure module. Subclass :class:`WorkerEvents` and override what you need; methods are
called on the worker's claim-loop thread, so they must be quick and must not raise
(an exception is logged and ignored).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._leases import ClaimedJob
    from .worker import Worker


class WorkerEvents:
    """No-op base class of worker observers (``Worker(app, observers=[...])``)."""

    def worker_started(self, worker: Worker) -> None:
        """The worker registered and is about to claim."""

    def job_started(self, job: ClaimedJob) -> None:
        """A claimed job was handed to the executor (``job.claimed_at`` is database time)."""

    def job_finished(self, job: ClaimedJob, outcome: str, duration: float) -> None:
        """An attempt's outcome was written: ``done``, ``retry``, ``failed``, ``discarded``,
        ``timeout`` or ``cancelled``; ``duration`` in seconds."""

    def counted(self, name: str, amount: int) -> None:
        """A guarantee was exercised ``amount`` times: ``name`` is one of
        ``pgtasks._counters.COUNTER_NAMES`` (lease_lost, rescued, fenced_writes_refused,
        released_at_shutdown, unknown_task_jobs; see docs/howto/metrics.md). Called on the
        thread that counted it (the rescuer's for rescues, a job's for a refused meta
        update), not only the claim loop's."""

    def batch_finished(self, task_name: str, size: int, duration: float) -> None:
        """A batch of a batch task ran and its outcomes were written: ``size`` jobs, in
        ``duration`` seconds (each job's end is a ``job_finished`` too). Called on the
        worker's batch thread."""

    def worker_stopped(self, worker: Worker) -> None:
        """The worker deregistered."""
