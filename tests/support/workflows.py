"""Moving a workflow's jobs by hand (no worker): claim what is due and write outcomes for
some of its jobs, as a worker would (fenced), so that a test sets up any state."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import psycopg

from pgtasks import App
from pgtasks._leases import ClaimRequest, Finish
from pgtasks._retry import Outcome

#: The worker id the outcomes are written under (no registration needed).
HAND = 1


def settle(app: App, outcomes: Mapping[int, Any]) -> dict[int, str]:
    """Claim every due job, write ``outcomes`` (job id -> result, or an exception: the job
    fails for good) for those claimed, and release the others; the statuses written."""
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        store = app.queries
        claimed = {job.id: job for job in store.claim_jobs(conn, ClaimRequest(HAND, limit=10_000))}
        finishes = []
        for job_id, value in outcomes.items():
            assert job_id in claimed, f"job {job_id} was not due"
            if isinstance(value, BaseException):
                error = f"Traceback (most recent call last):\n{type(value).__name__}: {value}"
                finishes.append(Finish.of(claimed[job_id], Outcome.failed(error)))
            else:
                finishes.append(Finish.of(claimed[job_id], Outcome.done(json.dumps(value))))
        written = store.finish_jobs(conn, finishes)
        others = [job for job_id, job in claimed.items() if job_id not in outcomes]
        if others:
            store.release_jobs(conn, others)
    return written


def steps(app: App, workflow_id: int) -> dict[str, dict[str, Any]]:
    """A workflow's jobs by step."""
    return {job["workflow_step"]: job for job in app.get_workflow(workflow_id)["jobs"]}
