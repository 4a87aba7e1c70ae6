"""Operator actions keep a workflow whole, errors and results are clear, workflows can be
found (through the public API and the admin functions the CLI and the dashboard use)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg
import pytest

from pgtasks import (
    App,
    JobCancelled,
    TaskFailed,
    WorkflowError,
    WorkflowFailed,
    WorkflowNotFoundError,
    WorkflowProtectedError,
    chain,
    chord,
    group,
)
from pgtasks._app.workflow_admin import list_workflows, workflow_detail, workflow_incidents
from pgtasks._app.workflows import MAX_DEPTH
from pgtasks._job_filter import JobFilter
from pgtasks._worker.healer import heal
from tests.support.inprocess import execute, running_worker, select
from tests.support.workflows import settle, steps


@pytest.fixture
def tasks(app: App) -> dict[str, Any]:
    """``flaky`` fails until ``fixed`` is set; ``report`` is a chord callback with a
    default for its input (a retry without the input would run it with None)."""
    fixed = threading.Event()

    @app.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(name="flaky", max_attempts=1)
    def flaky(value: int) -> int:
        if not fixed.is_set():
            raise RuntimeError(f"flaky {value}")
        return value * 10

    @app.task(name="report")
    def report(results: list[int] | None = None) -> str:
        return f"report of {results!r}"

    @app.task(name="deeper")
    def deeper(values: list[int]) -> int:
        return max(values) + 1

    return {"add": add, "flaky": flaky, "report": report, "deeper": deeper, "fixed": fixed}


def count_jobs(admin_conn: psycopg.Connection[Any], app: App) -> int:
    return int(select(admin_conn, app, "SELECT count(*) FROM {schema}.all_jobs")[0][0])


# -- delete --------------------------------------------------------------------------------------
def test_delete_of_a_job_an_unfinished_workflow_needs_is_refused(
    app: App, admin: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    add, report = tasks["add"], tasks["report"]
    workflow = chord([add.s(1, 1), add.s(2, 2)], report.s()).delay()
    jobs = steps(app, workflow.id)
    first = jobs["0.0"]["id"]
    settle(app, {first: 2})
    with pytest.raises(WorkflowProtectedError) as refused:
        app.admin.delete_finished_job(first)
    message = str(refused.value)
    assert f"step 0.0 of workflow {workflow.id}, which has not finished" in message
    assert f"pgtasks workflows cancel {workflow.id}" in message
    assert count_jobs(admin, app) == 3
    # The callback still gets the member's result.
    settle(app, {jobs["0.1"]["id"]: 4})
    assert select(
        admin, app, "SELECT args FROM {schema}.all_jobs WHERE id = %s", [jobs["1"]["id"]]
    ) == [([[2, 4]],)]
    # Once the workflow has finished (here: cancelled), its jobs may be deleted.
    workflow.cancel()
    assert app.admin.delete_finished_job(first) == (True, "done")
    plain = add.delay(1, 2)
    settle(app, {plain.id: 3})
    assert app.admin.delete_finished_job(plain.id) == (True, "done")


# -- retry ---------------------------------------------------------------------------------------
def test_retry_of_a_cascade_cancelled_callback_gets_its_input_back(
    app: App, admin: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    add, flaky, report = tasks["add"], tasks["flaky"], tasks["report"]
    workflow = chord([add.s(1, 1), flaky.s(3)], report.s()).delay()
    jobs = steps(app, workflow.id)
    member, failing, callback = jobs["0.0"]["id"], jobs["0.1"]["id"], jobs["1"]["id"]
    with running_worker(app):
        with pytest.raises(WorkflowFailed):
            workflow.get(timeout=20)
        assert app.get_job(callback).status().value == "cancelled"
        # Its input cannot be made while a predecessor is failed: refused, naming it.
        with pytest.raises(WorkflowProtectedError) as refused:
            app.admin.retry_job(callback)
        assert (
            f"job {callback} was not retried: job {callback} is step 1 of workflow {workflow.id}"
            " and never received its input" in str(refused.value)
        )
        assert f"its predecessor step 0.1 (task flaky, job {failing}) is failed" in str(
            refused.value
        )
        assert app.get_job(callback).status().value == "cancelled"
        # Fix the cause, retry the failed member, then the callback: it waits for the
        # member, then starts with both results (never with None).
        tasks["fixed"].set()
        assert app.admin.retry_job(failing).retried
        result = app.admin.retry_job(callback)
        assert (result.retried, result.status) in ((True, "waiting"), (True, "pending"))
        assert workflow.get(timeout=20) == "report of [2, 30]"
    assert app.get_job(member).status().value == "done"
    assert workflow.status == "done"


def test_retry_of_cancelled_chain_steps_in_one_bulk_resumes_the_chain(
    app: App, admin: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    add, flaky = tasks["add"], tasks["flaky"]
    workflow = chain(add.s(1, 1), flaky.s(), add.s(1), add.s(10)).delay()
    jobs = steps(app, workflow.id)
    with running_worker(app):
        with pytest.raises(WorkflowFailed) as failed:
            workflow.get(timeout=20)
        assert failed.value.step == "1"
        tasks["fixed"].set()
        # The dashboard's bulk retry of everything failed or cancelled: the failed step
        # runs again, the cancelled steps wait for it again, in order.
        outcome = app.admin.retry_matching_steps(JobFilter())
        assert outcome.retried == sorted(jobs[step]["id"] for step in ("1", "2", "3"))
        assert outcome.refused == {}
        assert workflow.get(timeout=20) == 2 * 10 + 1 + 10


def test_bulk_retry_refuses_a_step_whose_predecessor_stays_failed(
    app: App, admin: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    add, flaky = tasks["add"], tasks["flaky"]
    workflow = chain(add.s(1, 1), flaky.s(), add.s(1)).delay()
    jobs = steps(app, workflow.id)
    settle(app, {jobs["0"]["id"]: 2})
    settle(app, {jobs["1"]["id"]: RuntimeError("flaky")})
    outcome = app.admin.retry_matching_steps(JobFilter(status="cancelled"))
    assert outcome.retried == []
    assert list(outcome.refused) == [jobs["2"]["id"]]
    assert "its predecessor step 1 (task flaky" in outcome.refused[jobs["2"]["id"]]
    assert app.get_job(jobs["2"]["id"]).status().value == "cancelled"


def test_retry_of_a_step_that_ran_keeps_its_input(
    app: App, admin: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    add, flaky = tasks["add"], tasks["flaky"]
    workflow = chain(add.s(1, 2), flaky.s()).delay()
    jobs = steps(app, workflow.id)
    settle(app, {jobs["0"]["id"]: 3})
    settle(app, {jobs["1"]["id"]: RuntimeError("flaky")})
    tasks["fixed"].set()
    result = app.admin.retry_job(jobs["1"]["id"])
    assert (result.retried, result.status, result.previous_status) == (True, "pending", "failed")
    with running_worker(app):
        assert workflow.get(timeout=20) == 30


# -- depth and errors ----------------------------------------------------------------------------
def test_nesting_past_the_documented_depth_is_a_workflow_error_and_writes_nothing(
    app: App, admin: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    add, deeper = tasks["add"], tasks["deeper"]

    def nested(depth: int) -> Any:
        canvas: Any = chord([add.s(0, 0)], deeper.s())
        for _ in range(depth - 1):
            canvas = chord([add.s(0, 0), canvas], deeper.s())
        return canvas

    deepest = nested(MAX_DEPTH)
    assert deepest.depth == MAX_DEPTH
    with pytest.raises(WorkflowError, match=f"nest at most {MAX_DEPTH} deep"):
        chord([add.s(1, 1), deepest], deeper.s())
    with pytest.raises(WorkflowError, match="nest at most"):
        nested(1000)  # about 1,000 deep: a WorkflowError, not a RecursionError
    with pytest.raises(WorkflowError, match="nest at most"):
        group(add.s(1, 1), chain(add.s(1, 1), deepest))
    assert count_jobs(admin, app) == 0
    # As deep as allowed is fine: built, enqueued and run, each level once.
    workflow = deepest.delay()
    assert count_jobs(admin, app) == 2 * MAX_DEPTH
    with running_worker(app, concurrency=4):
        assert workflow.get(timeout=60) == MAX_DEPTH


def test_get_raises_the_failed_step_as_a_task_failed(app: App, tasks: dict[str, Any]) -> None:
    add, flaky, report = tasks["add"], tasks["flaky"], tasks["report"]
    in_chord = chord([add.s(1, 1), flaky.s(5), add.s(2, 2)], report.s()).delay()
    in_group = chain(add.s(1, 1), group(add.s(1), flaky.s())).delay()
    last = chain(add.s(1, 1), flaky.s()).delay()
    cancelled = chain(add.s(1, 1), add.s(1)).delay()
    cancelled.cancel()
    with running_worker(app, concurrency=3):
        for workflow, step in ((in_chord, "0.1"), (in_group, "1.1"), (last, "1")):
            with pytest.raises(TaskFailed) as raised:
                workflow.get(timeout=20)
            failure = raised.value
            assert isinstance(failure, WorkflowFailed)
            assert (failure.workflow_id, failure.step, failure.task_name) == (
                workflow.id,
                step,
                "flaky",
            )
            assert failure.job_id == steps(app, workflow.id)[step]["id"]
            assert failure.exc_type == "RuntimeError" and failure.message.startswith("flaky")
        with pytest.raises(WorkflowFailed, match=r"failed at step 0\.1 \(task flaky"):
            asyncio.run(in_chord.aget(timeout=20))
    # Cancelled by a user: JobCancelled, as before, with the reason.
    with pytest.raises(JobCancelled, match="was cancelled") as raised_cancel:
        cancelled.get(timeout=5)
    assert not isinstance(raised_cancel.value, TaskFailed)


# -- finding workflows ---------------------------------------------------------------------------
def test_workflows_are_listed_filtered_and_detailed(
    app: App, admin: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    add, flaky, report = tasks["add"], tasks["flaky"], tasks["report"]
    done = chain(
        add.s(1, 2), chord([add.s(1), add.s(2), add.s(3)], report.s()), add.si(0, 0)
    ).delay()
    failed = chord([add.s(1, 1), flaky.s(1)], report.s()).delay()
    with running_worker(app, concurrency=3):
        assert done.get(timeout=20) == 0
        with pytest.raises(WorkflowFailed):
            failed.get(timeout=20)
    waiting = chain(add.s(5, 5), add.s(1)).delay()
    everything = list_workflows(app)
    assert [workflow.id for workflow in everything] == [waiting.id, failed.id, done.id]
    by_id = {workflow.id: workflow for workflow in everything}
    assert by_id[done.id].shape == "add → [3\N{MULTIPLICATION SIGN}add] → report → add"
    assert (by_id[done.id].kind, by_id[done.id].steps, by_id[done.id].steps_done) == ("chain", 6, 6)
    assert by_id[done.id].state == "done" and by_id[done.id].finished_at is not None
    assert by_id[done.id].started_at is not None
    assert (by_id[failed.id].state, by_id[failed.id].steps_done) == ("failed", 1)
    assert by_id[failed.id].shape == "[add, flaky] → report"
    assert (by_id[waiting.id].state, by_id[waiting.id].started_at) == ("running", None)
    assert by_id[waiting.id].finished_at is None
    assert [w.id for w in list_workflows(app, status="running")] == [waiting.id]
    assert [w.id for w in list_workflows(app, status="failed")] == [failed.id]
    assert [w.id for w in list_workflows(app, workflow_id=done.id)] == [done.id]
    assert [w.id for w in list_workflows(app, before=failed.id)] == [done.id]
    assert [w.id for w in list_workflows(app, limit=1)] == [waiting.id]
    with pytest.raises(ValueError, match="status: 'stuck' is not one of"):
        list_workflows(app, status="stuck")

    detail = workflow_detail(app, done.id)
    assert detail.summary == by_id[done.id]
    assert [step.step for step in detail.steps] == ["0", "1.0.0", "1.0.1", "1.0.2", "1.1", "2"]
    ids = [step.id for step in detail.steps]
    assert detail.edges == [
        (ids[0], ids[1]),
        (ids[0], ids[2]),
        (ids[0], ids[3]),
        (ids[1], ids[4]),
        (ids[2], ids[4]),
        (ids[3], ids[4]),
        (ids[4], ids[5]),
    ]
    assert [step.result_text for step in detail.steps] == [
        "3",
        "4",
        "5",
        "6",
        '"report of [4, 5, 6]"',
        "0",
    ]
    assert all(step.status == "done" and step.seconds is not None for step in detail.steps)
    failed_detail = workflow_detail(app, failed.id).as_json()
    member = next(step for step in failed_detail["steps_detail"] if step["task_name"] == "flaky")
    assert member["error_line"] == "RuntimeError: flaky 1"
    callback = failed_detail["steps_detail"][-1]
    assert callback["status"] == "cancelled" and callback["error_line"].startswith(
        "WorkflowAborted: step 0.1"
    )
    with pytest.raises(WorkflowNotFoundError):
        workflow_detail(app, 10**12)


# -- healing -------------------------------------------------------------------------------------
def test_healing_moves_stuck_steps_on_once_and_records_it(
    app: App, admin: psycopg.Connection[Any], dsn: str, tasks: dict[str, Any]
) -> None:
    add, report = tasks["add"], tasks["report"]
    lost = chord([add.s(1, 1), add.s(2, 2)], report.s()).delay()
    blocked = chain(add.s(1, 1), add.s(1), add.s(2)).delay()
    healthy = chain(add.s(1, 1), add.s(1)).delay()
    lost_jobs, blocked_jobs = steps(app, lost.id), steps(app, blocked.id)
    # Both members done, the callback's start lost (written by hand: no trigger).
    execute(admin, app, "ALTER TABLE {schema}.jobs DISABLE TRIGGER USER")
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET status = 'done', result = to_jsonb(id), finished_at = now()"
        " WHERE id = ANY(%s)",
        [[lost_jobs["0.0"]["id"], lost_jobs["0.1"]["id"]]],
    )
    # A failed first step whose cascade was lost.
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET status = 'failed', last_error = 'RuntimeError: x',"
        " finished_at = now() WHERE id = %s",
        [blocked_jobs["0"]["id"]],
    )
    execute(admin, app, "ALTER TABLE {schema}.jobs ENABLE TRIGGER USER")
    with psycopg.connect(dsn, autocommit=True) as conn:
        first = heal(app.queries, conn)
        again = heal(app.queries, conn)
    assert (first.started, first.cancelled) == ([lost_jobs["1"]["id"]], [blocked_jobs["1"]["id"]])
    assert again.healed == 0 and not again.unhealable
    callback = select(
        admin,
        app,
        "SELECT status, args FROM {schema}.all_jobs WHERE id = %s",
        [lost_jobs["1"]["id"]],
    )
    assert callback == [("pending", [[lost_jobs["0.0"]["id"], lost_jobs["0.1"]["id"]]])]
    # The cancelled step's own successor was cancelled by the trigger, naming it.
    rows = steps(app, blocked.id)
    assert [rows[step]["status"] for step in ("0", "1", "2")] == [
        "failed",
        "cancelled",
        "cancelled",
    ]
    assert "WorkflowAborted: step 0 of workflow" in rows["1"]["last_error"]
    assert "WorkflowAborted: step 1 of workflow" in rows["2"]["last_error"]
    assert [job["status"] for job in app.get_workflow(healthy.id)["jobs"]] == ["pending", "waiting"]
    healed = workflow_incidents(app, kind="healed")
    assert sorted(incident.job_id for incident in healed) == sorted(
        [lost_jobs["1"]["id"], blocked_jobs["1"]["id"]]
    )
    assert {incident.workflow_id for incident in healed} == {lost.id, blocked.id}
    with pytest.raises(WorkflowFailed, match="failed at step 0 "):
        blocked.get(timeout=5)
