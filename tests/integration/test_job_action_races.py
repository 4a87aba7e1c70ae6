"""Job actions against a worker claiming the same jobs at that moment (migration 0022).

Edit vs claim: the arguments of jobs a busy worker is claiming in turn are edited from
the last to the first, so that the edits meet the claims: each edit either lands before
its job's claim (the job runs with the new arguments) or is refused with "already
started" (it runs with the old ones); never an edit reported saved that the run missed.

Run now vs claim: jobs falling due one after the other are made due again and again
while the worker claims them: each runs exactly once, on its first attempt, and every
run-now the audit records changed a job that was still pending."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from pgtasks import App
from pgtasks._app import controls, pending_jobs
from pgtasks._errors import JobNotPendingError
from tests.support.inprocess import running_worker, select
from tests.support.waiting import wait_until


def test_an_edit_racing_a_claim_lands_before_it_or_is_refused_as_already_started(
    app: App,
) -> None:
    ran: dict[int, list[Any]] = {}
    lock = threading.Lock()

    @app.task(name="race.edit", bind=True)
    def record(context: Any, n: int, version: str) -> None:
        with lock:
            ran.setdefault(context.job_id, []).append(version)
        time.sleep(0.01)

    jobs = record.delay_many([{"n": n, "version": "old"} for n in range(60)])
    saved: set[int] = set()
    refused: set[int] = set()
    with running_worker(app, concurrency=1, poll_interval=0.05):
        for job in reversed(jobs):
            try:
                pending_jobs.edit_arguments(app, job.id, [], {"n": 0, "version": "new"})
            except JobNotPendingError as error:
                assert "already started" in str(error) or "is done" in str(error), error
                refused.add(job.id)
            else:
                saved.add(job.id)
        wait_until(lambda: len(ran) == len(jobs), timeout=30, message="every job ran")
    print(f"\n[edit vs claim] {len(saved)} edits saved, {len(refused)} refused")
    assert saved and refused  # the edits did meet the claims
    for job in jobs:
        expected = ["new"] if job.id in saved else ["old"]
        assert ran[job.id] == expected, (job.id, ran[job.id])
    audited = {int(row["target"][4:]) for row in controls.read_audit(app, limit=1000)}
    assert audited == saved


def test_run_now_racing_claims_runs_each_job_once_and_changes_only_pending_ones(
    app: App,
) -> None:
    ran: dict[int, int] = {}
    lock = threading.Lock()

    @app.task(name="race.run_now", bind=True)
    def record(context: Any, n: int) -> None:
        with lock:
            ran[context.job_id] = ran.get(context.job_id, 0) + 1

    # Due one after the other over about a second, the first ones at once.
    jobs = [record.apply_async(args=[n], countdown=0.02 * n) for n in range(50)]
    ids = [job.id for job in jobs]
    made_due: list[int] = []
    with running_worker(app, concurrency=2, poll_interval=0.05):
        deadline = time.monotonic() + 30
        while len(ran) < len(jobs) and time.monotonic() < deadline:
            made_due += pending_jobs.run_now(app, ids).done
        wait_until(lambda: len(ran) == len(jobs), timeout=30, message="every job ran")
    print(f"\n[run now vs claim] {len(made_due)} jobs made due by run-now")
    assert made_due, "run-now changed no job (it never met a pending job scheduled later)"
    assert all(count == 1 for count in ran.values()), ran
    with app.connection() as conn:
        rows = select(
            conn, app, "SELECT attempts, status FROM {schema}.all_jobs WHERE id = ANY(%s)", [ids]
        )
    assert set(rows) == {(1, "done")}
    audited = [int(row["target"][4:]) for row in controls.read_audit(app, limit=10_000)]
    assert sorted(audited) == sorted(made_due)


@pytest.mark.parametrize("seconds", [0, -1, float("nan"), True, "60"])
def test_a_bad_snooze_is_refused_before_anything_is_written(app: App, seconds: Any) -> None:
    with pytest.raises(ValueError, match="snooze seconds must be"):
        pending_jobs.snooze(app, [1], seconds)
