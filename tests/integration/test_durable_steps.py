"""A step's transaction (``ctx.transaction()``, ``ctx.atransaction()``), ``@app.step``,
an attempt that goes on after parking its job, and the step counters of process-pool
children: in-process workers on the test's schema (docs/howto/durable.md)."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from pgtasks import App, JobContext, JobStatus, StepError
from pgtasks._durable import Parked
from tests.apps.durable_app import create_effects_table, effects, record, register_tasks
from tests.support.inprocess import finished, running_worker
from tests.support.waiting import wait_until

APP_PATH = "tests.apps.durable_app:app"


@pytest.fixture
def effects_table(app: App, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        create_effects_table(conn, app.schema)


def test_transaction_commits_the_writes_with_the_checkpoint(
    app: App, dsn: str, effects_table: None
) -> None:
    tries: list[int] = []

    def reserve(ctx: JobContext) -> int:
        with ctx.transaction() as conn:
            record(app, ctx, "reserve", conn)
        tries.append(1)
        if len(tries) == 1:  # after the write, in the step: its transaction rolls back
            raise ConnectionError("the 1st try fails after its write")
        with ctx.transaction() as conn:  # a second block: the same transaction
            record(app, ctx, "reserve-again", conn)
        return len(tries)

    @app.task(bind=True, max_attempts=3, retry_backoff=0.05)
    def order(ctx: JobContext) -> Any:
        value = ctx.step("reserve", reserve, ctx, retries=1)
        if ctx.attempt == 1:
            raise RuntimeError("the job fails after its exactly-once step")
        return value

    with running_worker(app):
        handle = order.delay()
        assert handle.get(timeout=20) == 2
    # The 1st try's write rolled back with it; the 2nd try's committed with its
    # checkpoint, and the retried job replayed it.
    assert effects(dsn, app.schema, handle.id) == [("reserve", 1), ("reserve-again", 1)]
    assert [step["status"] for step in app.get_job_steps(handle.id)] == ["done"]


def test_atransaction_in_an_async_step(app: App, dsn: str, effects_table: None) -> None:
    async def reserve(ctx: JobContext, amount: int) -> int:
        async with ctx.atransaction() as conn:
            await conn.execute(
                f'INSERT INTO "{app.schema}".effects (job_id, step, attempt) VALUES (%s, %s, %s)',
                (ctx.job_id, "reserve", ctx.attempt),
            )
        return amount

    async def reserve_with(conn: psycopg.AsyncConnection[Any], ctx: JobContext) -> str:
        await conn.execute(
            f'INSERT INTO "{app.schema}".effects (job_id, step, attempt) VALUES (%s, %s, %s)',
            (ctx.job_id, "connection", ctx.attempt),
        )
        return type(conn).__name__

    @app.task(bind=True, max_attempts=3, retry_backoff=0.05)
    async def order(ctx: JobContext) -> Any:
        amount = await ctx.astep("reserve", reserve, ctx, 5)
        kind = await ctx.astep("connection", reserve_with, ctx, connection=True)
        if ctx.attempt == 1:
            raise RuntimeError("the job fails after its steps")
        return [amount, kind]

    with running_worker(app):
        handle = order.delay()
        assert handle.get(timeout=20) == [5, "AsyncConnection"]
    assert effects(dsn, app.schema, handle.id) == [("reserve", 1), ("connection", 1)]


def test_transaction_outside_a_step_or_a_worker_is_a_clear_error(app: App) -> None:
    @app.task(bind=True, max_attempts=3)
    def outside(ctx: JobContext) -> None:
        with ctx.transaction():
            pass

    with pytest.raises(RuntimeError, match="needs a job run by a worker"):
        outside()
    with running_worker(app):
        row = finished(outside.delay())
    assert row.status is JobStatus.FAILED and row.attempts == 1, "no retry of a misuse"
    assert "for the function of a step" in (row.last_error or "")


def test_step_decorator_checkpoints_inside_a_task_and_runs_plainly_outside(app: App) -> None:
    runs: list[str] = []
    billed_runs: list[int] = []

    @app.step
    def charge(amount: int) -> dict[str, int]:
        runs.append("charge")
        return {"charged": amount}

    @app.step(name="notify", retries=2)
    async def send(text: str) -> str:
        runs.append("notify")
        return text.upper()

    @app.task(max_attempts=3, retry_backoff=0.05)  # unbound: no context argument
    def bill(amount: int) -> list[Any]:
        first, second = charge(amount), charge(amount + 1)
        billed_runs.append(1)
        if len(billed_runs) == 1:
            raise RuntimeError("retry once: both charges replay")
        return [first, second]

    @app.task(bind=True, max_attempts=3, retry_backoff=0.05)
    async def tell(ctx: JobContext) -> str:
        text = await send("sent")
        if ctx.attempt == 1:
            raise RuntimeError("retry once: the notification replays")
        return str(text)

    assert charge(1) == {"charged": 1} and runs == ["charge"], "outside a task: plainly"
    runs.clear()
    with running_worker(app):
        billed = bill.delay(10)
        assert billed.get(timeout=20) == [{"charged": 10}, {"charged": 11}]
        told = tell.delay()
        assert told.get(timeout=20) == "SENT"
    assert runs == ["charge", "charge", "notify"]
    steps = [(step["name"], step["occurrence"]) for step in app.get_job_steps(billed.id)]
    assert steps == [("charge", 1), ("charge", 2)]
    assert [step["name"] for step in app.get_job_steps(told.id)] == ["notify"]
    with pytest.raises(ValueError, match="a prefix reserved"):
        app.step(name="pgtasks.own")(len)


def test_an_attempt_that_goes_on_after_parking_writes_nothing(app: App) -> None:
    """Parking gives the attempt back: the same worker claims the job again under the
    same (worker, attempt) lease. An attempt that caught the park and went on must
    neither write meta nor finish the job over the new attempt."""
    stale_returned, fresh_started = threading.Event(), threading.Event()
    refusals: list[str] = []

    @app.task(bind=True, max_attempts=2)
    def swallow(ctx: JobContext) -> str:
        try:
            ctx.sleep(0)  # parked, due at once: claimed again while this code goes on
        except Parked:
            assert fresh_started.wait(20)
            try:
                ctx.update_meta(stale=True)
            except StepError as error:
                refusals.append(str(error))
            stale_returned.set()
            return "stale"
        fresh_started.set()
        assert stale_returned.wait(20)
        wait_until(lambda: worker.counts.get("parked", 0) + worker.counts.get("done", 0) >= 1)
        return "fresh"

    with running_worker(app, concurrency=2) as worker:
        handle = swallow.delay()
        assert handle.get(timeout=20) == "fresh"
        row = handle.fetch()
    assert row.attempts == 1 and "stale" not in row.meta
    assert refusals and "parked its job" in refusals[0]


def test_process_pool_children_count_their_steps(
    app: App, dsn: str, effects_table: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGTASKS_DSN", dsn)
    monkeypatch.setenv("PGTASKS_TEST_SCHEMA", app.schema)
    tasks = register_tasks(app)
    with running_worker(app, app_path=APP_PATH, processes=1, pool="process") as worker:
        handle = tasks.five_steps.delay(fail_once=True)
        assert handle.get(timeout=30) == 150
        pids = set(worker.child_pids)
    assert {pid for _, _, pid in _effect_pids(dsn, app, handle.id)} <= pids
    # 5 written (3 on the 1st attempt, 2 on the 2nd), 3 replayed: stored with a heartbeat.
    wait_until(
        lambda: (
            (app.admin.counters()["steps_checkpointed"], app.admin.counters()["steps_replayed"])
            == (5, 3)
        ),
        timeout=20,
        message="the child's step counters stored",
    )


def _effect_pids(dsn: str, app: App, job_id: int) -> list[tuple[str, int, int]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            f'SELECT step, attempt, pid FROM "{app.schema}".effects WHERE job_id = %s',
            (job_id,),
        ).fetchall()
    return [(row[0], row[1], row[2]) for row in rows]


def test_retry_keeps_the_checkpoints_before_the_failed_step_on_request(app: App) -> None:
    runs: list[str] = []
    broken = [True]

    def run(name: str) -> str:
        runs.append(name)
        if name == "two" and broken[0]:
            raise ValueError("step two is broken")
        return name

    @app.task(bind=True, max_attempts=1)
    def three(ctx: JobContext) -> list[str]:
        return [ctx.step(name, run, name) for name in ("one", "two", "three")]

    with running_worker(app):
        failed = finished(three.delay())
        assert failed.status is JobStatus.FAILED and "StepFailed" in (failed.last_error or "")
        assert runs == ["one", "two"]
        broken[0] = False  # the bug in step two is fixed
        runs.clear()
        kept = app.admin.retry_job(failed.id, keep_steps=True)
        assert kept.retried and kept.steps_kept == 1  # "one"; the failed "two" runs again
        assert app.get_job(failed.id).get(timeout=20) == ["one", "two", "three"]
        assert runs == ["two", "three"]
        runs.clear()
        forked = app.fork_job(failed.id)  # every checkpoint (none failed now)
        assert forked.get(timeout=20) == ["one", "two", "three"] and runs == []
        broken[0] = True
        again = finished(three.delay())
        broken[0] = False
        runs.clear()
        assert not app.admin.retry_job(again.id).steps_kept  # default: from the top
        assert app.get_job(again.id).get(timeout=20) == ["one", "two", "three"]
        assert runs == ["one", "two", "three"]
