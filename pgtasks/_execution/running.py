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


@dataclasses.dataclass(eq=False)
class Running:
    """One attempt in flight. ``token`` tells apart two attempts of one job id."""

    token: int
    job: ClaimedJob
    task: Task[Any, Any] | None
    started: float
    deadline: float | None
    future: concurrent.futures.Future[Outcome] | None = None
    #: Set when the outcome was decided without the code (timeout); its late end is ignored.
    abandoned: bool = False
    #: Set when cancellation of the job was requested (JobContext.cancelled() reads it).
    cancel_requested: bool = False
    #: Set when the lease fence first refused a write of this attempt (it is counted once).
    lease_lost: bool = False

    def is_cancel_requested(self) -> bool:
        return self.cancel_requested

    #: The asyncio task of an ``async def`` job, to cancel it.
    async_task: asyncio.Task[Outcome] | None = None
    #: Where it runs: "thread", "process", "async" (None: unknown task, no code to run).
    executor: ExecutorName | None = None
    #: The attempt's trace (an instrumented App's thread or async job), ended by the
    #: worker once the outcome is written.
    trace: AttemptTrace | None = None
