"""Bulk edit of arguments (the jobs list's "Edit arguments" of ticked jobs) against a
worker claiming the same jobs at that moment: every round writes one arguments document
to all the jobs; each job runs with the document of the last round that reported it
edited (or its own, when none did), never with one whose edit was refused; the refused
are counted, and the audit holds exactly the edits reported."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from pgtasks import App, PayloadError
from pgtasks._app import controls
from pgtasks._app.bulk_edits import edit_arguments_many
from tests.support.inprocess import running_worker, select
from tests.support.waiting import wait_until


def test_a_bulk_edit_racing_claims_changes_only_jobs_still_pending(app: App) -> None:
    ran: dict[int, list[str]] = {}
    lock = threading.Lock()

    @app.task(name="race.bulk_edit", bind=True)
    def record(context: Any, version: str) -> None:
        with lock:
            ran.setdefault(context.job_id, []).append(version)
        time.sleep(0.005)

    jobs = record.delay_many([{"version": "original"} for _ in range(60)])
    ids = [job.id for job in jobs]
    last_edit: dict[int, str] = {}
    refused_total = edited_total = 0
    rounds = 0
    with running_worker(app, concurrency=1, poll_interval=0.05):
        deadline = time.monotonic() + 30
        while len(ran) < len(jobs) and time.monotonic() < deadline:
            version = f"round-{rounds}"
            outcome = edit_arguments_many(app, ids, [], {"version": version}, actor="test")
            assert sorted(outcome.done + outcome.refused) == sorted(ids)
            for job_id in outcome.done:
                last_edit[job_id] = version
            refused_total += len(outcome.refused)
            edited_total += len(outcome.done)
            rounds += 1
        wait_until(lambda: len(ran) == len(jobs), timeout=30, message="every job ran")
    print(f"\n[bulk edit vs claim] {rounds} rounds, {len(last_edit)} jobs edited at least once")
    assert last_edit and refused_total, "the edits did not meet the claims"
    for job_id in ids:
        assert ran[job_id] == [last_edit.get(job_id, "original")], (job_id, ran[job_id])
    audit = controls.read_audit(app, limit=100_000)
    assert {row["action"] for row in audit} == {"edit_arguments"}
    assert len(audit) == edited_total  # one row per edit reported, none for a refusal
    with app.connection() as conn:
        rows = select(
            conn, app, "SELECT attempts, status FROM {schema}.all_jobs WHERE id = ANY(%s)", [ids]
        )
    assert set(rows) == {(1, "done")}


def test_a_bulk_edit_is_refused_whole_for_bad_arguments_or_several_tasks(app: App) -> None:
    @app.task(name="bulk.one")
    def one(n: int) -> None: ...

    @app.task(name="bulk.two")
    def two(n: int) -> None: ...

    first = one.delay_many([{"n": n} for n in range(3)])
    other = two.delay(9)
    ids = [job.id for job in first]
    with pytest.raises(ValueError, match=r"of 2 tasks \(bulk.one, bulk.two\)"):
        edit_arguments_many(app, [*ids, other.id], [5], {})
    with pytest.raises(TypeError):  # the task's signature, as an enqueue checks it
        edit_arguments_many(app, ids, [], {"missing": 1})
    with pytest.raises(PayloadError):
        edit_arguments_many(app, ids, [float("nan")], {})
    assert controls.read_audit(app) == []
    outcome = edit_arguments_many(app, [*ids, 999_999], [7], {}, actor="test")
    assert (outcome.done, outcome.refused) == (tuple(ids), (999_999,))
    with app.connection() as conn:
        rows = select(conn, app, "SELECT args FROM {schema}.jobs WHERE id = ANY(%s)", [ids])
    assert rows == [([7],)] * 3
    assert len(controls.read_audit(app)) == 3
