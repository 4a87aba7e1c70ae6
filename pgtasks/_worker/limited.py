"""When a worker's round trips ask for jobs under limits, and what it waits for between
(LimitedClaims; see docs/howto/flow-control.md).

A worker whose schema stores some limit asks ``claim_limited`` first in each round trip.
After a limited claim that came back short, it asks for plain jobs alone until one of:

- the next rate token that held a job back is due (the claim says when; at most a poll
  interval later): the loop wakes for it;
- a slot of a limit that held a job back was freed by another worker (a notification on
  the limits channel) or by one of this worker's own limited jobs ending;
- an enqueue was notified, or a poll interval passed.

A limited claim that failed (any database error: it never stops the plain claim) is
tried again after a backoff of RETRY_FIRST seconds, doubling up to RETRY_MOST; each
distinct error is logged once, and the recovery once.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterable

from .._leases import LimitedClaimReport
from .._limits import FAIR_LIMIT

logger = logging.getLogger("pgtasks.worker")

#: Seconds before a failed limited claim is tried again, doubling on each failure.
RETRY_FIRST = 0.1
RETRY_MOST = 30.0
#: Seconds added to the wait for a rate token, so that the claim finds it due.
TOKEN_SLACK = 0.001
#: Distinct errors remembered for "logged once" (a hostile row could vary its text).
REMEMBERED_ERRORS = 100
#: Limit names whose freed slots are remembered (payloads are any text a role may send).
REMEMBERED_NAMES = 1000


class LimitedClaims:
    """The limited-claim state of one worker's claim loop (its thread), plus the wake-ups
    the listener thread hands it (``freed``, ``reset``: plain assignments only)."""

    def __init__(self, name: str, poll_interval: float) -> None:
        self.name = name
        self.poll_interval = poll_interval
        #: Some limit is stored: claims ask for limited jobs. Set at start.
        self.stored = False
        #: time.monotonic() before which claims leave limited jobs out.
        self.retry_at = 0.0
        #: time.monotonic() at which the loop wakes to ask again (a rate token is due, a
        #: failed claim is retried, a freed slot was notified); None: nothing scheduled.
        self.wake_at: float | None = None
        #: Limit names that held jobs back in the last short claim.
        self.blocked: frozenset[str] = frozenset()
        self.failures = 0
        #: When each limit name was last notified freed (monotonic): a notification that
        #: comes while a claim is on the server is not lost if that claim then finds the
        #: limit full.
        self._freed_at: dict[str, float] = {}
        #: When reset() last asked for limited jobs again (monotonic): a claim prepared
        #: before then and back after it must not put the limited claim off.
        self._reset_at = 0.0
        self._logged: set[str] = set()
        self._lock = threading.Lock()

    def start(self, *, stored: bool) -> None:
        """Whether some limit is stored (the worker read it before its first claim)."""
        self.stored = stored

    def ask(self, now: float) -> bool:
        """Whether the next round trip asks for limited jobs."""
        return self.stored and now >= self.retry_at

    def asking(self, now: float) -> bool:
        """:meth:`ask`, for the round trip being prepared: when it asks, what its claim
        finds says when to wake next (the wake-up scheduled is dropped)."""
        if not self.ask(now):
            return False
        self.wake_at = None
        return True

    def due(self, now: float) -> bool:
        """A wake-up for a limited claim is due: claim even if nothing else calls for it."""
        wake_at = self.wake_at
        return wake_at is not None and now >= wake_at

    def reset(self) -> None:
        """Ask for limited jobs again at the next claim (an enqueue was notified, or a
        limited job of this worker ended). Any thread."""
        if self.failures:
            return  # a failing claim keeps its backoff
        self._reset_at = time.monotonic()
        self.retry_at = 0.0

    def changed(self) -> None:
        """An operator changed, paused or reset a limit: some limit is stored now, and
        the next claim asks for limited jobs at once (a raised limit is used without
        waiting for a poll interval). Any thread."""
        self.stored = True
        if self.failures:
            return  # a failing claim keeps its backoff
        self._reset_at = time.monotonic()
        self.retry_at = 0.0
        self.wake_at = time.monotonic()

    def freed(self, names: Iterable[str]) -> bool:
        """A notification: slots of the limits ``names`` were freed by another worker.
        True when this worker waits for one of them (it should claim now). Any thread."""
        names = tuple(names)
        if not self.stored and FAIR_LIMIT in names:
            # The first fair job of the schema stored its limit: claim fair jobs from now on.
            self.stored = True
            self.retry_at, self.wake_at = 0.0, time.monotonic()
            return True
        if self.failures or not self.stored:
            return False
        now = time.monotonic()
        freed_at = self._freed_at
        if len(freed_at) > REMEMBERED_NAMES:
            freed_at.clear()  # any role may send names: keep the memory bounded
        for name in names:
            freed_at[name] = now
        if self.blocked.isdisjoint(names):
            return False
        self.retry_at = 0.0
        self.wake_at = now
        return True

    def claimed(
        self, *, asked: int, taken: int, report: LimitedClaimReport | None, started: float
    ) -> None:
        """A round trip that asked for ``asked`` limited jobs got ``taken``; ``started``
        is time.monotonic() when it was prepared."""
        if report is not None and report.error is not None:
            self.failed(report.error)
            return
        if self.failures:
            logger.info(
                "worker %s: limited claims work again after %d failed attempt(s)",
                self.name,
                self.failures,
            )
            self.failures = 0
        if taken >= asked:
            self.retry_at, self.wake_at, self.blocked = 0.0, None, frozenset()
            return
        self.blocked = frozenset(report.blocked) if report is not None else frozenset()
        freed_at = self._freed_at
        if self._reset_at > started or any(
            freed_at.get(name, 0.0) >= started for name in self.blocked
        ):
            # A slot of a limit that held a job back was freed while this claim ran, or an
            # enqueue was notified meanwhile (the new job may be one this claim could not
            # see): ask again now rather than after a poll interval.
            self.retry_at, self.wake_at = 0.0, time.monotonic()
            return
        wait = report.wait if report is not None else None
        if wait is not None and wait < self.poll_interval:
            # A rate token is due before the next poll: wake for it (counted from now, after
            # the reply: a moment late rather than early, which the bucket's burst absorbs).
            self.retry_at = self.wake_at = time.monotonic() + max(0.0, wait) + TOKEN_SLACK
        else:
            self.retry_at = started + self.poll_interval
            self.wake_at = None

    def failed(self, error: str) -> None:
        """The limited claim failed (nothing of it was kept): plain claims go on; ask
        again after the backoff."""
        self.failures += 1
        delay = min(RETRY_MOST, RETRY_FIRST * 2 ** min(self.failures - 1, 20))
        delay *= random.uniform(0.8, 1.2)  # noqa: S311 - spreading retries only
        self.retry_at = self.wake_at = time.monotonic() + delay
        text = " ".join(error.split())
        with self._lock:
            first = text not in self._logged
            if first:
                if len(self._logged) >= REMEMBERED_ERRORS:
                    self._logged.clear()
                self._logged.add(text)
        if first:
            logger.warning(
                "worker %s: the claim of jobs under limits failed (%s); plain jobs are still"
                " claimed, limited ones again in %.1f s, backing off to %g s while it fails"
                " (`pgtasks doctor` checks the limits table)",
                self.name,
                text,
                delay,
                RETRY_MOST,
            )
        else:
            logger.debug("worker %s: the limited claim failed again: %s", self.name, text)
