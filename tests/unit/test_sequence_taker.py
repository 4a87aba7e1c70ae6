"""Which round trips name a taker for the next jobs of the sequences they end
(migration sequence_handover), and the finish's mark of a sequence job, whatever a
hand-written meta holds."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest

from pgtasks._leases import ClaimedJob, ClaimRequest, Finish
from pgtasks._retry import Outcome
from pgtasks._store.claims import _sequence_taker

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def job(meta: Any) -> ClaimedJob:
    claimed = ClaimedJob(
        id=1,
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
        worker_id=7,
    )
    object.__setattr__(claimed, "meta", meta)  # as a claim's row may carry it
    return claimed


@pytest.mark.parametrize(
    ("meta", "sequence"),
    [
        ({"pgtasks.sequence": "k"}, True),
        ({}, False),
        (None, False),
        (5, False),
        ("pgtasks.sequence", False),
        (["pgtasks.sequence"], False),
    ],
)
def test_a_finish_marks_a_sequence_job_only_from_an_object_meta(meta: Any, sequence: bool) -> None:
    assert Finish.of(job(meta), Outcome.done("null")).sequence is sequence


def test_only_a_round_trip_that_ends_a_sequence_job_and_claims_names_a_taker() -> None:
    ended = Finish.of(job({"pgtasks.sequence": "k"}), Outcome.done("null"))
    retried = Finish.of(job({"pgtasks.sequence": "k"}), Outcome.retry(1.0, "boom"))
    plain = Finish.of(job({}), Outcome.done("null"))
    claim = ClaimRequest(7, 10, queues=("a",), excluded_queues=None, task_names=("t",))

    assert _sequence_taker([ended], None) is None  # nothing claimed: no taker
    assert _sequence_taker([plain], claim) is None
    assert _sequence_taker([retried], claim) is None  # a retry keeps the turn
    taker = _sequence_taker([plain, ended], claim)
    assert taker is not None
    assert json.loads(taker) == {"worker": 7, "queues": ["a"], "excluded": None, "tasks": ["t"]}
