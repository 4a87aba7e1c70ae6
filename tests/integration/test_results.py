"""job.get() / aget(), cancellation and job snapshots against a real worker."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pgtasks import App, JobCancelled, JobContext, JobNotFoundError, JobStatus, TaskFailed
from pgtasks._leases import ClaimRequest
from tests.support.inprocess import Gates, execute, running_worker
from tests.support.waiting import wait_until


@pytest.fixture
def gates() -> Any:
    made = Gates()
    yield made
    made.open_all()


def test_get_returns_the_result_of_a_sync_task(app: App) -> None:
    @app.task
    def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    job = add.delay(2, 3)
    with running_worker(app):
        assert job.get(timeout=10) == {"sum": 5}


def test_aget_returns_the_result_of_an_async_task(app: App) -> None:
    @app.task
    async def double(value: int) -> int:
        await asyncio.sleep(0)
        return value * 2

    async def scenario() -> int:
        job = await double.adelay(21)
        try:
            return await job.aget(timeout=10)
        finally:
            await app.aclose()

    with running_worker(app):
        assert asyncio.run(scenario()) == 42


def test_get_raises_task_failed_with_the_remote_type_message_and_traceback(app: App) -> None:
    @app.task(max_attempts=1)
    def explode(card: str) -> None:
        raise ValueError(f"card {card} declined")

    job = explode.delay("4000")
    with running_worker(app), pytest.raises(TaskFailed) as failure:
        job.get(timeout=10)
    assert failure.value.exc_type == "ValueError"
    assert failure.value.message == "card 4000 declined"
    assert "Traceback (most recent call last)" in failure.value.traceback
    assert "in explode" in failure.value.traceback
    assert failure.value.job_id == job.id


def test_get_times_out_on_a_job_nobody_runs(app: App) -> None:
    @app.task
    def never_run() -> None:
        return None

    job = never_run.delay()
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=f"job {job.id} did not finish within 0.3 s"):
        job.get(timeout=0.3)
    assert time.monotonic() - started < 2.0


def test_get_on_a_missing_job_raises_job_not_found(app: App) -> None:
    with pytest.raises(JobNotFoundError):
        app.get_job(10**12)
    from pgtasks import JobHandle

    with pytest.raises(JobNotFoundError):
        JobHandle(app, 10**12).get(timeout=1)


def test_get_on_a_job_pruned_while_waiting_raises_instead_of_hanging(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task
    def slow() -> None:
        return None

    job = slow.delay()
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            job.get(timeout=20)
        except BaseException as error:
            outcome.append(error)

    waiter = threading.Thread(target=wait)
    waiter.start()
    wait_until(lambda: app.result_listener().healthy, message="the result listener")
    execute(admin, app, "DELETE FROM {schema}.jobs WHERE id = %s", (job.id,))
    waiter.join(10)
    assert not waiter.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], JobNotFoundError)


def test_get_wakes_on_the_completion_notification_not_the_poll(app: App, gates: Any) -> None:
    gate = gates()

    @app.task
    def held() -> str:
        gate.wait(10)
        return "released"

    job = held.delay()
    with running_worker(app):
        result: list[Any] = []
        waiter = threading.Thread(target=lambda: result.append(job.get(timeout=20)))
        waiter.start()
        wait_until(lambda: job.status() is JobStatus.RUNNING, message="the job to run")
        wait_until(lambda: app.result_listener().healthy, message="the result listener")
        released = time.monotonic()
        gate.set()
        waiter.join(10)
        latency = time.monotonic() - released
    print(f"completion-to-get latency: {latency * 1000:.1f} ms")
    assert result == ["released"]
    assert latency < 1.5  # the fallback poll is 2 s while the listener is healthy


def test_cancelling_a_pending_job_means_it_never_runs(app: App) -> None:
    runs: list[int] = []

    @app.task
    def work() -> None:
        runs.append(1)

    job = work.delay()
    result = job.cancel()
    assert (result.outcome, result.status) == ("cancelled", JobStatus.CANCELLED)
    follower = work.delay()
    with running_worker(app):
        follower.get(timeout=10)
    assert runs == [1]
    assert job.status() is JobStatus.CANCELLED
    with pytest.raises(JobCancelled):
        job.get(timeout=1)


def test_cancelling_a_running_async_task_cancels_its_coroutine(app: App) -> None:
    seen: list[str] = []
    started = threading.Event()

    @app.task
    async def forever() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    job = forever.delay()
    with running_worker(app):
        assert started.wait(10)
        result = app.cancel(job.id)
        assert result.outcome == "requested"
        with pytest.raises(JobCancelled):
            job.get(timeout=10)
    assert seen == ["cancelled"]
    assert job.refresh().row is not None and job.row.status is JobStatus.CANCELLED


def test_a_bound_sync_task_stops_at_its_next_cancelled_check(app: App) -> None:
    started = threading.Event()
    steps: list[int] = []

    @app.task(bind=True)
    def batch(ctx: JobContext, items: int) -> str:
        started.set()
        for item in range(items):
            if ctx.cancelled():
                return f"stopped after {item}"
            steps.append(item)
            time.sleep(0.01)  # a unit of work
        return "all done"

    job = batch.delay(100_000)
    with running_worker(app):
        assert started.wait(10)
        assert job.cancel().outcome == "requested"
        with pytest.raises(JobCancelled):
            job.get(timeout=10)
    assert 0 < len(steps) < 100_000
    assert job.fetch().status is JobStatus.CANCELLED
    assert job.fetch().result is None


def test_a_cancel_notification_missed_is_caught_by_the_heartbeat(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    started = threading.Event()

    @app.task(bind=True)
    def loop(ctx: JobContext) -> None:
        started.set()
        while not ctx.cancelled():
            time.sleep(0.01)

    job = loop.delay()
    with running_worker(app, heartbeat_interval=0.2):
        assert started.wait(10)
        # Flag it in SQL, without the notification cancel() sends.
        execute(
            admin, app, "UPDATE {schema}.jobs SET cancel_requested = true WHERE id = %s", (job.id,)
        )
        with pytest.raises(JobCancelled):
            job.get(timeout=10)


def test_cancelling_a_finished_job_changes_nothing_and_says_so(app: App) -> None:
    @app.task
    def quick() -> int:
        return 7

    job = quick.delay()
    with running_worker(app):
        assert job.get(timeout=10) == 7
    result = job.cancel()
    assert (result.outcome, result.status) == ("already_finished", JobStatus.DONE)
    assert "already finished" in str(result)
    assert job.get(timeout=1) == 7


def test_cancelling_a_missing_job_raises_job_not_found(app: App) -> None:
    with pytest.raises(JobNotFoundError):
        app.cancel(10**12)


def test_a_cancel_requested_job_of_a_dead_worker_is_rescued_as_cancelled(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task
    def orphan() -> None:
        return None

    job = orphan.delay()
    ghost = 10**9
    app.queries.claim_jobs(admin, ClaimRequest(ghost, limit=1))
    assert app.cancel(job.id).outcome == "requested"
    with running_worker(app, rescue_interval=0.2), pytest.raises(JobCancelled):
        job.get(timeout=10)
    assert "WorkerLostError" in (job.refresh().last_error or "")


def test_refresh_exposes_the_row_as_properties(app: App) -> None:
    @app.task(max_attempts=3)
    def answer() -> int:
        return 42

    job = answer.delay()
    assert job.refresh().attempts == 0
    assert job.finished_at is None
    with running_worker(app):
        job.get(timeout=10)
    job.refresh()
    assert (job.attempts, job.result, job.last_error) == (1, 42, None)
    assert job.finished_at is not None and job.created_at <= job.finished_at
    assert job.run_at <= job.finished_at


def test_async_cancel_and_get_work_from_asyncio(app: App, make_app: Callable[..., App]) -> None:
    @app.task
    def pending_forever() -> None:
        return None

    async def scenario() -> None:
        job = await pending_forever.adelay()
        result = await job.acancel()
        assert result.outcome == "cancelled"
        with pytest.raises(JobCancelled):
            await job.aget(timeout=5)
        await app.aclose()

    asyncio.run(scenario())
