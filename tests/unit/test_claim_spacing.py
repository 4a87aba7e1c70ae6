"""How often a worker's claim reads the pending index from its start (Worker._claim_from)."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from pgtasks import App, Worker
from pgtasks._worker.worker import FULL_CLAIM_SHARE, MAX_FULL_CLAIM_SPACING

POSITION = (0, dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), 7)


@pytest.fixture
def worker() -> Worker:
    # No database is reached: a Worker connects only in run().
    return Worker(App("postgresql://nobody@127.0.0.1:1/none"), poll_interval=1.0)


def test_reads_from_the_start_without_a_position_then_from_the_position(worker: Worker) -> None:
    assert worker._claim_from() is None
    worker._position = POSITION
    assert worker._claim_from() == POSITION


def test_reads_from_the_start_again_once_a_poll_interval_has_passed(worker: Worker) -> None:
    worker._position = POSITION
    assert worker._claim_from() is None  # the first claim, and it schedules the next
    assert worker._claim_from() == POSITION
    worker._next_full_claim = time.monotonic() - 0.001
    assert worker._claim_from() is None


def test_a_cheap_claim_from_the_start_keeps_the_poll_interval(worker: Worker) -> None:
    before = time.monotonic()
    worker._full_claim_took(0.002)
    assert before + 0.9 < worker._next_full_claim <= time.monotonic() + 1.0


def test_a_slow_claim_from_the_start_is_spaced_by_its_cost_up_to_a_cap(worker: Worker) -> None:
    before = time.monotonic()
    worker._full_claim_took(0.5)
    spacing = worker._next_full_claim - before
    assert 0.5 * FULL_CLAIM_SHARE - 0.1 < spacing <= 0.5 * FULL_CLAIM_SHARE + 0.1

    worker._full_claim_took(60.0)
    assert worker._next_full_claim - time.monotonic() <= MAX_FULL_CLAIM_SPACING
    assert worker._next_full_claim - before > MAX_FULL_CLAIM_SPACING - 1.0
