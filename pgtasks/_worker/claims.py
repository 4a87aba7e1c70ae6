"""Where a busy worker's next claim reads the pending index from (ClaimCursor).

Claims read on from the worker's position: the (priority, run_at, id) of the last job it
claimed, so they skip the index entries of jobs already claimed instead of walking them
(see docs/explanation/claim-and-rescue.md). A claim reads from the start after an empty
claim and at least once per poll interval, so a job that sorts before the position (run_at
in the past, released or rescued meanwhile) waits at most that long. While claims from the
start are slow (an old snapshot keeps the entries of claimed jobs), they are spaced so
that they take at most 1/FULL_CLAIM_SHARE of the loop's time, and at most
MAX_FULL_CLAIM_SPACING seconds apart.

How many jobs a claim takes beyond the free slots is the Prefetch's decision: a fixed
number, or by default (``prefetch=None``) AUTO_PREFETCH_PER_SLOT per slot while the jobs
this worker ran lately averaged at most SHORT_JOB seconds, and none otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from .._leases import ClaimedJob, ClaimPosition

FULL_CLAIM_SHARE = 20.0
MAX_FULL_CLAIM_SPACING = 30.0

#: Jobs whose recent average run time is at most this (seconds) are short: prefetch for them.
SHORT_JOB = 0.010
#: With the automatic prefetch, jobs claimed beyond the free slots, per slot, for short jobs.
AUTO_PREFETCH_PER_SLOT = 2
#: Weight of the newest run time in the moving average (one long job turns prefetch off).
_AVERAGE_WEIGHT = 0.1

#: The smallest share a round trip's claim is cut to (round_trip_share). A round trip
#: costs about a millisecond whatever it carries (about 0.3 ms of it the worker's own
#: CPU), so cutting a small batch costs more than the overlap wins: at concurrency 10
#: (30 jobs with the prefetch) one round trip at a time is faster, at 50 (150) two of 75.
MIN_SHARE = 32


def round_trip_share(free: int, pipeline: int, lanes: int) -> int:
    """How many of ``free`` slots one round trip claims, with ``lanes`` round trips in
    flight at most and ``pipeline`` jobs the worker holds at most (slots and prefetch).

    A round trip takes longer than short jobs take to run a batch: with the whole
    pipeline claimed at once, its jobs wait for the round trip, and the round trip for
    them. Claimed in shares, one share's jobs run while another's round trip is on the
    server. Shares smaller than MIN_SHARE are not worth their round trips: all at once.
    """
    if lanes < 2:
        return free
    share = -(-pipeline // lanes)
    return free if share < MIN_SHARE else min(free, share)


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

    def claimed(self, jobs: Sequence[ClaimedJob], *, from_start: bool, seconds: float) -> None:
        """Record a claim's jobs (in claim order). An empty claim (idle, or nothing left past
        the position) makes the next claim read from the start."""
        if from_start:
            self.full_claim_took(seconds)
        # Jobs that limits apply to come first and have no place in the plain claim order.
        last = jobs[-1] if jobs else None
        self.position = last.position if last is not None and not last.limited else None


class Prefetch:
    """How many jobs a claim takes beyond the free slots.

    ``fixed`` (an int) always; None: automatic. A short job ends long before the round trip
    that claims its successor comes back, so its slot idles for that round trip; claimed in
    advance, the successor starts at once. The automatic prefetch claims
    AUTO_PREFETCH_PER_SLOT jobs per slot while the moving average of the run times of this
    worker's jobs is at most SHORT_JOB, so a prefetched job waits behind about two short
    jobs; before the first job ends, and as soon as jobs turn long, it claims none.
    """

    def __init__(self, fixed: int | None, slots: Callable[[], int]) -> None:
        self.fixed = fixed
        self._slots = slots
        #: Moving average of recent run times (seconds); None before the first job ended.
        self.average: float | None = None

    def observe(self, seconds: float) -> None:
        """A job ran ``seconds`` (any thread: a lost update only delays the average)."""
        average = self.average
        self.average = (
            seconds if average is None else average + (seconds - average) * _AVERAGE_WEIGHT
        )

    @property
    def jobs(self) -> int:
        """Jobs to claim beyond the free slots now."""
        if self.fixed is not None:
            return self.fixed
        average = self.average
        if average is None or average > SHORT_JOB:
            return 0
        return AUTO_PREFETCH_PER_SLOT * self._slots()

    @property
    def most(self) -> int:
        """The most it may ever claim beyond the free slots."""
        return self.fixed if self.fixed is not None else AUTO_PREFETCH_PER_SLOT * self._slots()
