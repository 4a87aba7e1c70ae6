"""How often a worker's claim reads the pending index from its start (ClaimCursor)."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from pgtasks._worker.claims import FULL_CLAIM_SHARE, MAX_FULL_CLAIM_SPACING, ClaimCursor

POSITION = (0, dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), 7)


@pytest.fixture
def cursor() -> ClaimCursor:
    """The claim cursor of a worker with a poll interval of 1 s."""
    return ClaimCursor(poll_interval=1.0)


def test_reads_from_the_start_without_a_position_then_from_the_position(
    cursor: ClaimCursor,
) -> None:
    assert cursor.claim_from() is None
    cursor.position = POSITION
    assert cursor.claim_from() == POSITION


def test_reads_from_the_start_again_once_a_poll_interval_has_passed(cursor: ClaimCursor) -> None:
    cursor.position = POSITION
    assert cursor.claim_from() is None  # the first claim, and it schedules the next
    assert cursor.claim_from() == POSITION
    cursor.next_full_claim = time.monotonic() - 0.001
    assert cursor.claim_from() is None


def test_a_cheap_claim_from_the_start_keeps_the_poll_interval(cursor: ClaimCursor) -> None:
    before = time.monotonic()
    cursor.full_claim_took(0.002)
    assert before + 0.9 < cursor.next_full_claim <= time.monotonic() + 1.0


def test_a_slow_claim_from_the_start_is_spaced_by_its_cost_up_to_a_cap(cursor: ClaimCursor) -> None:
    before = time.monotonic()
    cursor.full_claim_took(0.5)
    spacing = cursor.next_full_claim - before
    assert 0.5 * FULL_CLAIM_SHARE - 0.1 < spacing <= 0.5 * FULL_CLAIM_SHARE + 0.1

    cursor.full_claim_took(60.0)
    assert cursor.next_full_claim - time.monotonic() <= MAX_FULL_CLAIM_SPACING
    assert cursor.next_full_claim - before > MAX_FULL_CLAIM_SPACING - 1.0
