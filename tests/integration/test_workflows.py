"""Workflows (chain, group, chord) against a real worker: results passed along, failure
and cancellation policy, transactional creation, bad input."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from pgtasks import (
    App,
    GroupResult,
    JobCancelled,
    JobStatus,
    PayloadNotSerializableError,
    TaskFailed,
    UnknownTaskError,
    WorkflowError,
    WorkflowFailed,
    WorkflowNotFoundError,
    chain,
    chord,
    group,
)
from pgtasks._app.workflow_admin import workflow_incidents
from tests.support.inprocess import execute, prune, running_worker, select
from tests.support.waiting import wait_until


@pytest.fixture
def tasks(app: App) -> dict[str, Any]:
    @app.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(name="mul")
    def mul(a: int, b: int) -> int:
        return a * b

    @app.task(name="total")
    def total(values: list[int], extra: int = 0) -> int:
        return sum(values) + extra

    @app.task(name="const")
    def const(value: Any) -> Any:
        return value

    @app.task(name="boom", max_attempts=1)
    def boom(*args: Any) -> None:
        raise RuntimeError("boom")

    @app.task(name="record")
    def record(info: Any, label: str) -> dict[str, Any]:
        return {"label": label, "info": info}

    return {
        "add": add,
        "mul": mul,
        "total": total,
        "const": const,
        "boom": boom,
        "record": record,
    }


def statuses(admin: psycopg.Connection[Any], app: App, workflow_id: int) -> list[str]:
    rows = select(
        admin,
        app,
        "SELECT status FROM {schema}.all_jobs WHERE workflow_id = %s ORDER BY id",
        [workflow_id],
    )
    return [row[0] for row in rows]


def test_chain_passes_each_result_to_the_next_step(app: App, tasks: dict[str, Any]) -> None:
    add, mul = tasks["add"], tasks["mul"]
    workflow = chain(add.s(1, 2), mul.s(10), add.s(5)).apply_async()
    assert workflow.status == "running"
    with running_worker(app):
        assert workflow.get(timeout=20) == (1 + 2) * 10 + 5
    assert workflow.status == "done"
    described = app.get_workflow(workflow.id)
    assert [job["workflow_step"] for job in described["jobs"]] == ["0", "1", "2"]
    assert described["kind"] == "chain" and described["finished_at"] is not None


def test_immutable_signature_ignores_the_previous_result(app: App, tasks: dict[str, Any]) -> None:
    add, const = tasks["add"], tasks["const"]
    fails = (
        add.s(1, 2) | const.si("fixed") | add.s(1).set(queue="default", max_attempts=1)
    ).delay()
    workflow = (add.s(1, 2) | const.si(7) | add.s(1)).delay()
    with running_worker(app):
        assert workflow.get(timeout=20) == 8
        with pytest.raises(TaskFailed):  # "fixed" + 1: the last step gets the string
            fails.get(timeout=20)


def test_group_results_come_in_member_order(app: App, tasks: dict[str, Any]) -> None:
    add = tasks["add"]
    workflow = group(add.s(index, index) for index in range(8)).apply_async()
    assert isinstance(workflow, GroupResult)
    with running_worker(app, concurrency=4):
        assert workflow.get(timeout=20) == [index * 2 for index in range(8)]


def test_chord_callback_gets_the_list_of_results(app: App, tasks: dict[str, Any]) -> None:
    add, total = tasks["add"], tasks["total"]
    workflow = chord(group(add.s(1, index) for index in range(5)), total.s(extra=100)).delay()
    with running_worker(app, concurrency=3):
        assert workflow.get(timeout=20) == sum(1 + index for index in range(5)) + 100


def test_chord_inside_a_chain_and_a_group_after_a_step(app: App, tasks: dict[str, Any]) -> None:
    add, mul, total = tasks["add"], tasks["mul"], tasks["total"]
    # 2 → [2*1, 2*2, 2*3] → 12 → 13
    workflow = chain(
        add.s(1, 1), chord(group(mul.s(1), mul.s(2), mul.s(3)), total.s()), add.s(1)
    ).delay()
    # A group after a step, ending the chain: each member gets the step's result.
    fan_out = chain(add.s(2, 3), group(mul.s(2), mul.s(3))).delay()
    assert isinstance(fan_out, GroupResult)
    with running_worker(app, concurrency=3):
        assert workflow.get(timeout=20) == 13
        assert fan_out.get(timeout=20) == [10, 15]


def test_a_failed_step_cancels_the_rest_of_the_chain_naming_it(
    app: App, admin: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    add, boom = tasks["add"], tasks["boom"]
    workflow = chain(add.s(1, 2), boom.s(), add.s(1), add.s(2)).delay()
    with running_worker(app), pytest.raises(TaskFailed) as raised:
        workflow.get(timeout=20)
    jobs = app.get_workflow(workflow.id)["jobs"]
    # The failed step, not the last one that was never run, is what get() raises.
    failure = raised.value
    assert isinstance(failure, WorkflowFailed)
    assert (failure.workflow_id, failure.step, failure.task_name, failure.job_id) == (
        workflow.id,
        "1",
        "boom",
        jobs[1]["id"],
    )
    assert (failure.exc_type, failure.message) == ("RuntimeError", "boom")
    assert "Traceback" in failure.traceback
    assert str(failure) == (
        f"workflow {workflow.id} failed at step 1 (task boom, job {jobs[1]['id']}):"
        " RuntimeError: boom"
    )
    assert statuses(admin, app, workflow.id) == ["done", "failed", "cancelled", "cancelled"]
    assert "WorkflowAborted: step 1" in jobs[3]["last_error"]
    assert workflow.status == "failed"


def test_chord_member_failure_skips_the_callback_and_runs_on_error(
    app: App, admin: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    add, boom, total, record = tasks["add"], tasks["boom"], tasks["total"], tasks["record"]
    workflow = chord(
        [add.s(1, 1), boom.s(), boom.s(), add.s(2, 2)],
        total.s(),
        on_error=record.s(label="chord failed"),
    ).delay()
    with running_worker(app, concurrency=4):
        with pytest.raises(WorkflowFailed, match=r"failed at step 0\.[12] \(task boom"):
            workflow.get(timeout=20)
        wait_until(
            lambda: app.get_workflow(workflow.id)["status"] != "running",
            message="the on_error job",
        )
    described = app.get_workflow(workflow.id)
    error_jobs = [job for job in described["jobs"] if job["workflow_step"] == "on_error"]
    assert len(error_jobs) == 1  # two members failed: still one on_error job
    error_job = app.get_job(error_jobs[0]["id"])
    result = error_job.get(timeout=5)
    assert result["label"] == "chord failed"
    assert result["info"]["status"] == "failed" and result["info"]["task_name"] == "boom"
    assert result["info"]["workflow_id"] == workflow.id
    callback = next(job for job in described["jobs"] if job["task_name"] == "total")
    assert callback["status"] == "cancelled"


def test_cancel_cancels_what_has_not_run(
    app: App, admin: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    add = tasks["add"]
    workflow = chain(add.s(1, 2), add.s(3), add.s(4)).delay()
    assert workflow.cancel() == 3
    assert statuses(admin, app, workflow.id) == ["cancelled"] * 3
    assert workflow.status == "cancelled"
    with pytest.raises(JobCancelled, match="was cancelled"):
        workflow.get(timeout=5)
    with pytest.raises(WorkflowNotFoundError):
        app.cancel_workflow(10**12)


def test_cancelling_one_waiting_step_cancels_its_successors(
    app: App, admin: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    add = tasks["add"]
    workflow = chain(add.s(1, 2), add.s(3), add.s(4)).delay()
    jobs = app.get_workflow(workflow.id)["jobs"]
    assert [job["status"] for job in jobs] == ["pending", "waiting", "waiting"]
    result = app.cancel(jobs[1]["id"])
    assert result.outcome == "cancelled"
    assert statuses(admin, app, workflow.id) == ["pending", "cancelled", "cancelled"]
    with running_worker(app):
        assert app.get_job(jobs[0]["id"]).get(timeout=10) == 3
    assert statuses(admin, app, workflow.id) == ["done", "cancelled", "cancelled"]


def test_transactional_creation_rolled_back_leaves_no_rows(
    app: App, admin: psycopg.Connection[Any], dsn: str, tasks: dict[str, Any]
) -> None:
    add, total = tasks["add"], tasks["total"]
    with psycopg.connect(dsn) as conn:
        workflow = chord([add.s(1, 1), add.s(2, 2)], total.s()).apply_async(connection=conn)
        assert workflow.id > 0
        conn.rollback()
    assert select(admin, app, "SELECT count(*) FROM {schema}.all_jobs")[0][0] == 0
    assert select(admin, app, "SELECT count(*) FROM {schema}.workflows")[0][0] == 0
    with psycopg.connect(dsn) as conn:
        committed = chain(add.s(1, 1), add.s(1)).apply_async(connection=conn)
    assert statuses(admin, app, committed.id) == ["pending", "waiting"]


def test_bad_input_gets_clear_errors_and_writes_nothing(
    app: App, admin: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    add, total = tasks["add"], tasks["total"]
    with pytest.raises(UnknownTaskError, match="no_such_task"):
        app.signature("no_such_task", (1,))
    with pytest.raises(WorkflowError, match="empty group"):
        group([])
    with pytest.raises(WorkflowError, match="empty group"):
        chord([], total.s())
    with pytest.raises(WorkflowError, match="signature"):
        chain(add.s(1, 2), lambda: None)  # type: ignore[arg-type]
    with pytest.raises(PayloadNotSerializableError):
        chain(add.s(1, 2), add.s(object())).delay()
    with pytest.raises(WorkflowError, match="do not match task 'add'"):
        chain(add.s(1, 2), add.s(1, 2)).delay()  # the second step gets 3 arguments
    with pytest.raises(WorkflowError, match="unknown signature option"):
        add.s(1, 2).set(countdown=5)
    with pytest.raises(WorkflowError, match="outermost"):
        chain(add.s(1, 2), chord([add.s(1)], total.s(), on_error=add.si(1, 1))).delay()
    with app.eager(), pytest.raises(WorkflowError, match="eager mode"):
        chain(add.s(1, 2), add.s(1)).delay()
    assert select(admin, app, "SELECT count(*) FROM {schema}.all_jobs")[0][0] == 0
    assert app.signature("add", (1, 2)).delay().id > 0


def test_waiting_is_a_status_everywhere(app: App, tasks: dict[str, Any]) -> None:
    add = tasks["add"]
    workflow = chain(add.s(1, 2), add.s(3)).delay()
    second = app.get_job(app.get_workflow(workflow.id)["jobs"][1]["id"])
    assert second.status() is JobStatus.WAITING
    stats = app.database.run(lambda conn: app.admin.collect_stats(conn))
    assert stats.total.waiting == 1 and stats.total.pending == 1


def test_hand_written_workflow_rows_never_stop_the_worker(
    app: App, admin: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    add, boom = tasks["add"], tasks["boom"]
    broken = chain(boom.s(), add.s(1)).apply_async(on_error=add.si(1, 1))
    # An on_error the trigger cannot insert, and links to jobs that do not exist.
    execute(
        admin,
        app,
        "UPDATE {schema}.workflows SET on_error = %s::jsonb WHERE id = %s",
        ['{"queue": 5}', broken.id],
    )
    lost = chain(add.s(1, 1), add.s(1)).delay()
    first = app.get_workflow(lost.id)["jobs"][0]["id"]
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET next_ids = ARRAY[-1, %s], input_mode = 'list',"
        " prev_ids = ARRAY[-5] WHERE id = %s",
        [first, first],
    )
    with running_worker(app):
        with pytest.raises(WorkflowFailed, match="step 0"):
            broken.get(timeout=20)
        assert app.get_job(first).get(timeout=20) == 2
        assert add.delay(2, 2).get(timeout=20) == 4  # the worker goes on
    assert statuses(admin, app, broken.id) == ["failed", "cancelled"]
    # Tolerated, and recorded where doctor and the dashboard read it (not only in the
    # server log): the on_error job that could not be inserted.
    recorded = workflow_incidents(app, workflow_id=broken.id)
    assert [(incident.kind, incident.sqlstate) for incident in recorded] == [("tolerated", "23502")]
    assert "could not start its on_error job" in recorded[0].detail


def test_pruning_keeps_a_workflow_until_all_its_jobs_finished(
    app: App, admin: psycopg.Connection[Any], dsn: str, tasks: dict[str, Any]
) -> None:
    add, total = tasks["add"], tasks["total"]
    workflow = chord([add.s(1, 1), add.s(2, 2)], total.s()).delay()
    plain = add.delay(1, 1)
    jobs = app.get_workflow(workflow.id)["jobs"]

    def age_everything() -> None:
        execute(
            admin,
            app,
            "UPDATE {schema}.jobs SET finished_at = now() - interval '2 hours'"
            " WHERE finished_at IS NOT NULL",
        )
        # Finished jobs are in jobs_history (migration jobs_history).
        execute(
            admin,
            app,
            "UPDATE {schema}.jobs_history SET finished_at = finished_at - interval '2 hours'",
        )
        execute(admin, app, "UPDATE {schema}.workflows SET created_at = now() - interval '2 hours'")

    def prune_now() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            prune(app.queries, conn, done_after=3600.0, failed_after=3600.0)

    with running_worker(app):
        assert plain.get(timeout=20) == 2
        assert app.get_job(jobs[0]["id"]).get(timeout=20) == 2
        assert app.get_job(jobs[1]["id"]).get(timeout=20) == 4
        assert workflow.get(timeout=20) == 6
    # The callback's row still waits: members done, but the workflow is not finished.
    execute(admin, app, "SELECT {schema}.jobs_restore(ARRAY[%s]::bigint[])", [jobs[2]["id"]])
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET status = 'waiting', finished_at = NULL,"
        " waiting_for = 0 WHERE id = %s",
        [jobs[2]["id"]],
    )
    age_everything()
    prune_now()
    assert statuses(admin, app, workflow.id) == ["done", "done", "waiting"]
    assert (
        select(admin, app, "SELECT count(*) FROM {schema}.all_jobs WHERE workflow_id IS NULL")[0][0]
        == 0
    )
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET status = 'done', finished_at = now() WHERE id = %s",
        [jobs[2]["id"]],
    )
    age_everything()
    prune_now()
    assert select(admin, app, "SELECT count(*) FROM {schema}.all_jobs")[0][0] == 0
    assert select(admin, app, "SELECT count(*) FROM {schema}.workflows")[0][0] == 0
    with pytest.raises(WorkflowNotFoundError):
        app.get_workflow(workflow.id)


def test_a_step_rescued_out_of_attempts_cancels_the_rest(
    app: App, admin: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    add = tasks["add"]
    workflow = chain(add.s(1, 2).set(max_attempts=1), add.s(3), add.s(4)).delay()
    first = app.get_workflow(workflow.id)["jobs"][0]["id"]
    # Its worker (id -1, never registered) was lost during its only attempt.
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET status = 'running', attempts = 1, locked_by = -1,"
        " locked_at = now() WHERE id = %s",
        [first],
    )
    with running_worker(app), pytest.raises(WorkflowFailed, match="step 0") as raised:
        workflow.get(timeout=20)
    assert raised.value.exc_type == "WorkerLostError" and raised.value.job_id == first
    assert statuses(admin, app, workflow.id) == ["failed", "cancelled", "cancelled"]
    assert "WorkerLostError" in (app.get_job(first).fetch().last_error or "")


def test_async_enqueue_and_aget(
    app: App, admin: psycopg.Connection[Any], dsn: str, tasks: dict[str, Any]
) -> None:
    add, total = tasks["add"], tasks["total"]

    async def scenario() -> tuple[int, list[int], int]:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            rolled_back = await chain(add.s(1, 1), add.s(1)).aapply_async(connection=conn)
            await conn.rollback()
        workflow = await chord([add.s(1, 1), add.s(2, 2)], total.s()).adelay()
        members = await group(add.s(1, 1), add.s(2, 2)).aapply_async()
        return await workflow.aget(timeout=20), await members.aget(timeout=20), rolled_back.id

    with running_worker(app):
        result, members, rolled_back = asyncio.run(scenario())
    assert (result, members) == (6, [2, 4])
    with pytest.raises(WorkflowNotFoundError):
        app.get_workflow(rolled_back)


def test_workflow_steps_count_in_their_concurrency_limits(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    app.queue("reports", concurrency=2)

    @app.task(name="render", queue="reports")
    def render(value: int) -> int:
        return value + 1

    @app.task(name="per_user", concurrency_key=lambda user_id, value=0: user_id, concurrency=1)
    def per_user(user_id: int, value: int = 0) -> int:
        return user_id

    with pytest.raises(WorkflowError, match=r"concurrency_key=.*\.si\(\)"):
        chain(render.s(1), per_user.s()).apply_async()
    workflow = chain(render.s(1), render.s(), per_user.si(7)).apply_async()
    rows = select(
        admin,
        app,
        "SELECT limit_groups, limit_key FROM {schema}.all_jobs WHERE workflow_id = %s ORDER BY id",
        (workflow.id,),
    )
    assert [tuple(row) for row in rows] == [
        (["queue:reports"], None),
        (["queue:reports"], None),
        (["key:per_user\x1f7"], "7"),
    ], rows
    with running_worker(app):
        assert workflow.get(timeout=20) == 7
