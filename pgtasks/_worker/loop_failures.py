"""How the claim loop meets an error of one of its steps (LoopFailures).

A database error, or anything one job brought (text that cannot be encoded, a bug),
must cost at most that job: the loop finds the outcome the server refuses and fails that
attempt alone, retries a round trip that wrote nothing after a transient error, and after
a lost connection recovers the claims a lost reply may have carried. It never stops.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import psycopg

from .._retry import reconnect_delay
from .._store.error_kinds import is_transient

if TYPE_CHECKING:
    from .exchange import Exchanges
    from .parts import LoopParts

logger = logging.getLogger("pgtasks.worker")


class LoopFailures:
    """The failures of the claim loop's steps since the last step that succeeded."""

    def __init__(self, parts: LoopParts, exchanges: Exchanges) -> None:
        self.parts = parts
        self.exchanges = exchanges
        #: Steps failed in a row (not counting transient errors): recover before the next.
        self.failures = 0
        #: Transient errors in a row (lock timeouts, serialization failures, deadlocks).
        self.transient = 0

    def succeeded(self) -> None:
        """A step went through: the failures are over (once no recovery is pending)."""
        self.failures = self.transient = 0
        if not self.exchanges.recover_needed:
            self.parts.errors.recovered()

    def handle(self, error: Exception) -> float:
        """Meet ``error`` of a step; returns the seconds to pause before the next one."""
        exchanges, ledger, connection = self.exchanges, self.parts.ledger, self.parts.connection
        errors = self.parts.errors
        if not isinstance(error, psycopg.Error):
            # Not the database: something one job brought (text that cannot be encoded,
            # a bug). Find the outcome behind it and fail that job alone.
            logger.exception("worker %s: unexpected error in the claim loop", self.parts.name)
            if ledger.unwritten:
                try:
                    exchanges.write_one_by_one(error)
                    return 0.0
                except Exception as lost:
                    error = lost
            if not isinstance(error, psycopg.Error):
                # A claim's rows may be lost with it: release what we do not know we
                # hold, then go on after a pause.
                self.failures += 1
                errors.failed(error)
                exchanges.lost_track()
                return reconnect_delay(self.failures)
        if is_transient(error) and connection.usable:
            # A lock timeout, a serialization failure, a deadlock (a workflow's next step
            # held by another session, a REPEATABLE READ default): the round trip wrote
            # nothing. Its outcomes stay unwritten and the same round trip is tried again
            # after a pause; no outcome is replaced.
            self.transient += 1
            errors.failed(error)
            exchanges.claim_again()
            return reconnect_delay(self.transient)
        if connection.usable and ledger.unwritten:
            # The server refused the batch itself (not the connection): find and fail the
            # outcome it cannot store, so one bad job cannot stop the loop.
            try:
                exchanges.write_one_by_one(error)
                return 0.0
            except Exception as lost:
                # The connection was lost after all (a pipeline can fail before psycopg
                # marks it broken): the outcomes not written are kept in the ledger;
                # recover as from any connection failure.
                error = lost
        self.failures += 1
        errors.failed(error)
        connection.drop()
        # The wake-up that led here was spent on a failed claim, and notifications may be
        # lost with the listener's connection: claim at once on recovery instead of
        # waiting for the next poll.
        exchanges.claim_again()
        return reconnect_delay(self.failures)
