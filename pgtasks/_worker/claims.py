"""Where a busy worker's next claim reads the pending index from (ClaimCursor).

Claims read on from the worker's position: the (priority, run_at, id) of the last job it
claimed, so they skip the index entries of jobs already claimed instead of walking them
(see docs/explanation/claim-and-rescue.md). A claim reads from the start after an empty
claim and at least once per poll interval, so a job that sorts before the position (run_at
in the past, released or rescued meanwhile) waits at most that long. While claims from the
start are slow (an old snapshot keeps the entries of claimed jobs), they are spaced so
that they take at most 1/FULL_CLAIM_SHARE of the loop's time, and at most
MAX_FULL_CLAIM_SPACING seconds apart.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .._store.base import Row
from .._store.store import ClaimPosition, claim_position

FULL_CLAIM_SHARE = 20.0
MAX_FULL_CLAIM_SPACING = 30.0


class ClaimCursor:
    """The claim position of one worker and when to read from the start again."""

    def __init__(self, poll_interval: float) -> None:
        self.poll_interval = poll_interval
        self.position: ClaimPosition | None = None
        #: time.monotonic() from which the next claim reads from the start.
        self.next_full_claim = 0.0

    def claim_from(self) -> ClaimPosition | None:
        """The position the next claim reads on from, or None to read from the start."""
        now = time.monotonic()
        if self.position is None or now >= self.next_full_claim:
            self.next_full_claim = now + self.poll_interval
            return None
        return self.position

    def full_claim_took(self, seconds: float) -> None:
        """Space the claims from the start by their cost."""
        spacing = min(MAX_FULL_CLAIM_SPACING, max(self.poll_interval, seconds * FULL_CLAIM_SHARE))
        self.next_full_claim = max(self.next_full_claim, time.monotonic() + spacing)

    def claimed(self, rows: Sequence[Row], *, from_start: bool, seconds: float) -> None:
        """Record a claim's rows (in claim order). An empty claim (idle, or nothing left past
        the position) makes the next claim read from the start."""
        if from_start:
            self.full_claim_took(seconds)
        self.position = claim_position(rows[-1]) if rows else None
