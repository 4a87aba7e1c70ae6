"""How metrics and run_until_empty classify attempts, and the start latency (no database)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from pgtasks._leases import ClaimedJob
from pgtasks._worker.metrics import outcome_series, start_latency

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)


def claimed(
    *,
    attempt: int = 1,
    max_attempts: int = 3,
    created_at: datetime = T0,
    run_at: datetime = T0,
    claimed_at: datetime = T0,
) -> ClaimedJob:
    return ClaimedJob(
        id=1,
        task_name="app.task",
        queue="default",
        priority=0,
        args=[],
        kwargs={},
        attempt=attempt,
        max_attempts=max_attempts,
        run_at=run_at,
        created_at=created_at,
        claimed_at=claimed_at,
        worker_id=1,
    )


@pytest.mark.parametrize(
    ("outcome", "series"),
    [
        ("done", "succeeded"),
        ("retry", "retried"),
        ("failed", "failed"),
        ("discarded", "failed"),
        ("cancelled", "cancelled"),
        ("not-an-outcome", None),
    ],
)
def test_each_outcome_counts_in_its_series(outcome: str, series: str | None) -> None:
    assert outcome_series(outcome, claimed()) == series


def test_a_timeout_counts_as_a_retry_unless_it_was_the_last_attempt() -> None:
    assert outcome_series("timeout", claimed(attempt=2, max_attempts=3)) == "retried"
    assert outcome_series("timeout", claimed(attempt=3, max_attempts=3)) == "failed"


def test_start_latency_counts_from_creation_for_a_job_due_at_once() -> None:
    job = claimed(created_at=T0, run_at=T0, claimed_at=T0 + timedelta(milliseconds=250))

    assert start_latency(job) == pytest.approx(0.25)


def test_start_latency_counts_from_run_at_for_a_scheduled_job_or_a_retry() -> None:
    job = claimed(
        created_at=T0, run_at=T0 + timedelta(seconds=60), claimed_at=T0 + timedelta(seconds=61)
    )

    assert start_latency(job) == pytest.approx(1.0)


def test_start_latency_of_a_job_with_a_past_run_at_counts_from_its_creation() -> None:
    job = claimed(
        created_at=T0, run_at=T0 - timedelta(hours=1), claimed_at=T0 + timedelta(seconds=2)
    )

    assert start_latency(job) == pytest.approx(2.0)


def test_start_latency_is_never_negative() -> None:
    job = claimed(created_at=T0, run_at=T0, claimed_at=T0 - timedelta(milliseconds=1))

    assert start_latency(job) == 0.0
