"""LoopParts: what the claim loop's thread holds, handed together to the parts that act
on it (the round trips in exchange.py, the graceful stop in shutdown.py).

Each part changes only its own state, through its own methods: the ledger its jobs and
outcomes, the registration its id, the reporter its counters.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._execution.executor import Executor
    from .connection import OwnConnection
    from .ledger import JobLedger
    from .registration import Registration
    from .reporter import Reporter
    from .services import ErrorLog


@dataclasses.dataclass(frozen=True)
class LoopParts:
    """The registration (the lease owner of claims), the ledger (jobs from claim to
    written outcome), the executor that runs them, the loop's own connection, the
    reporter and the loop's error log."""

    registration: Registration
    ledger: JobLedger
    executor: Executor
    connection: OwnConnection
    reporter: Reporter
    errors: ErrorLog

    @property
    def name(self) -> str:
        """The worker's name (host:pid)."""
        return self.registration.name
