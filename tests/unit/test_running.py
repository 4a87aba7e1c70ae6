"""An attempt in flight (Running) and the ledger: their state changes through their own
methods, never by another part writing their fields."""

from __future__ import annotations

import threading
from datetime import datetime, timezone

import pytest

from pgtasks._execution.running import Running
from pgtasks._leases import ClaimedJob
from pgtasks._retry import Outcome
from pgtasks._worker.ledger import JobLedger

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def attempt(token: int = 1) -> Running:
    job = ClaimedJob(
        id=token,
        task_name="app.task",
        queue="default",
        priority=0,
        args=[],
        kwargs={},
        attempt=1,
        max_attempts=3,
        run_at=T0,
        created_at=T0,
        claimed_at=T0,
        worker_id=1,
    )
    return Running(token, job, None, 0.0, None)


def test_an_attempts_flags_change_only_through_its_methods() -> None:
    running = attempt()
    assert not (running.abandoned or running.cancel_requested or running.lease_lost)

    assert running.request_cancel() is True
    assert running.request_cancel() is False  # asked already
    assert running.cancel_requested and running.is_cancel_requested()

    assert running.lose_lease() is True
    assert running.lose_lease() is False  # counted once per attempt
    assert running.lease_lost

    running.abandon()
    assert running.abandoned
    for flag in ("abandoned", "cancel_requested", "lease_lost"):
        with pytest.raises(AttributeError):
            setattr(running, flag, False)


def test_the_ledger_records_started_attempts_and_drops_an_abandoned_ones_end() -> None:
    ledger = JobLedger(threading.Event())
    kept, abandoned = attempt(1), attempt(2)
    ledger.started(kept)
    ledger.started(abandoned)
    assert set(ledger.in_flight) == {1, 2}
    assert ledger.known_ids() == [1, 2]

    abandoned.abandon()
    assert ledger.active() == [kept]
    ledger.on_finished(kept, Outcome.done("null"))
    ledger.on_finished(abandoned, Outcome.done("null"))
    ledger.collect()
    assert ledger.in_flight == {}
    assert [running for running, _ in ledger.take_unwritten()] == [kept]
