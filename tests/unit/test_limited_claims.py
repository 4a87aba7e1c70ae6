"""When a worker asks for limited jobs again (pgtasks/_worker/limited.py): the wake-ups
that come while a limited claim is on the server are not lost when it comes back short."""

from __future__ import annotations

import time

from pgtasks._leases import LimitedClaimReport
from pgtasks._worker.limited import LimitedClaims

LIMIT = "task:reports.build"


def claims() -> LimitedClaims:
    limited = LimitedClaims("w", poll_interval=1.0)
    limited.start(stored=True)
    return limited


def short(blocked: tuple[str, ...] = (LIMIT,)) -> LimitedClaimReport:
    return LimitedClaimReport(blocked=blocked)


def test_a_short_claim_puts_the_limited_claim_off_until_the_next_poll() -> None:
    limited = claims()
    started = time.monotonic()

    limited.claimed(asked=5, taken=0, report=short(), started=started)

    assert not limited.ask(time.monotonic())
    assert limited.retry_at == started + 1.0 and limited.wake_at is None


def test_an_enqueue_notified_while_the_claim_ran_asks_again_at_once() -> None:
    """The new job may be one the claim could not see: it must not wait for the poll."""
    limited = claims()
    started = time.monotonic()
    limited.reset()  # the listener's thread, while the claim is on the server

    limited.claimed(asked=5, taken=0, report=short(()), started=started)

    assert limited.ask(time.monotonic()) and limited.due(time.monotonic())


def test_a_slot_freed_while_the_claim_ran_asks_again_at_once() -> None:
    limited = claims()
    started = time.monotonic()
    limited.freed([LIMIT])

    limited.claimed(asked=5, taken=0, report=short(), started=started)

    assert limited.ask(time.monotonic()) and limited.due(time.monotonic())


def test_a_reset_before_the_claim_was_prepared_is_answered_by_that_claim() -> None:
    limited = claims()
    limited.reset()
    started = time.monotonic()

    limited.claimed(asked=5, taken=0, report=short(), started=started)

    assert not limited.ask(time.monotonic())
