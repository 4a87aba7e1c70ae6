"""One attempt of a claimed job in flight (Running)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
from typing import Any

from .._app.tasks import Task
from .._instrumentation import AttemptTrace
from .._jobs import ExecutorName
from .._leases import ClaimedJob
from .._retry import Outcome
from .joblogs import AttemptLog


@dataclasses.dataclass(eq=False)
class Running:
    """One attempt in flight. ``token`` tells apart two attempts of one job id.

    The executor that starts it sets where and when it runs; its three flags change only
    through its methods (the worker's parts read them): :meth:`abandon`,
    :meth:`request_cancel` and :meth:`lose_lease`.
    """

    token: int
    job: ClaimedJob
    task: Task[Any, Any] | None
    started: float
    deadline: float | None
    future: concurrent.futures.Future[Outcome] | None = None
    #: The asyncio task of an ``async def`` job, to cancel it.
    async_task: asyncio.Task[Outcome] | None = None
    #: Where it runs: "thread", "process", "async" (None: unknown task, no code to run).
    executor: ExecutorName | None = None
    #: The attempt's trace (an instrumented App's thread or async job), ended by the
    #: worker once the outcome is written.
    trace: AttemptTrace | None = None
    #: Its captured log lines (None: job logs are off).
    log: AttemptLog | None = None
    _abandoned: bool = dataclasses.field(default=False, init=False, repr=False)
    _cancel_requested: bool = dataclasses.field(default=False, init=False, repr=False)
    _lease_lost: bool = dataclasses.field(default=False, init=False, repr=False)
    _parked: bool = dataclasses.field(default=False, init=False, repr=False)
    _terminate_requested: bool = dataclasses.field(default=False, init=False, repr=False)

    @property
    def abandoned(self) -> bool:
        """Its outcome was decided without its code (timeout, shutdown): its late end is
        ignored."""
        return self._abandoned

    def abandon(self) -> None:
        self._abandoned = True

    @property
    def cancel_requested(self) -> bool:
        """Cancellation of the job was requested (JobContext.cancelled() reads it)."""
        return self._cancel_requested

    def is_cancel_requested(self) -> bool:
        return self._cancel_requested

    def request_cancel(self) -> bool:
        """Ask it to stop; False when that was asked already."""
        first = not self._cancel_requested
        self._cancel_requested = True
        return first

    @property
    def terminate_requested(self) -> bool:
        """Termination was requested: its process child is killed, its coroutine cancelled
        (a thread cannot be killed: it gets the cancel flag only)."""
        return self._terminate_requested

    def request_terminate(self) -> bool:
        """Ask it to stop now (and cancel it); False when that was asked already."""
        first = not self._terminate_requested
        self._terminate_requested = self._cancel_requested = True
        return first

    @property
    def lease_lost(self) -> bool:
        """The lease fence refused a write of this attempt."""
        return self._lease_lost

    def lose_lease(self) -> bool:
        """The lease fence refused a write of this attempt: True the first time (the
        loss is counted once per attempt)."""
        first = not self._lease_lost
        self._lease_lost = True
        return first

    @property
    def parked(self) -> bool:
        """The attempt parked its job (a durable sleep or wait): whatever its code does
        next, the worker writes nothing more for it (the job may already run again, under
        the same worker and attempt number)."""
        return self._parked

    def park(self) -> None:
        self._parked = True


def describe_async_jobs(candidates: list[Running], current: asyncio.Task[object] | None) -> str:
    """Names the async job(s) on the loop (for the lag monitor): the current one when it
    is known."""
    blocking = [running for running in candidates if running.async_task is current]

    def name(running: Running) -> str:
        return f"async task {running.job.task_name} (job {running.job.id})"

    if blocking:
        return name(blocking[0])
    if candidates:
        return "one of " + ", ".join(name(running) for running in candidates)
    return "no pgtasks job (a callback or another library's task)"
