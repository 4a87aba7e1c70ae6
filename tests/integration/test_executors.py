"""Executors in an in-process Worker: routing, the process pool (hard limits, child death,
recycling, enqueue from a child, fork and spawn), soft limits, event-loop lag, validation.

Process-pool tests use ``tests.apps.executor_app``: spawned children import its ``app``
(built from PGTASKS_DSN / PGTASKS_TEST_SCHEMA, set per test) while the worker uses the
test's App with the same tasks. Real children, real signals, a real PostgreSQL.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pgtasks import (
    App,
    ConfigurationError,
    JobStatus,
    SoftTimeLimitExceeded,
    TaskRegistrationError,
    Worker,
)
from tests.apps.executor_app import Tasks, register_tasks
from tests.apps.worker_app import create_executions_table
from tests.support.inprocess import finished, recorded_runs, running_worker, select
from tests.support.processes import is_alive
from tests.support.waiting import wait_until

APP_PATH = "tests.apps.executor_app:app"


@pytest.fixture
def tasks(
    app: App, dsn: str, admin: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> Tasks:
    """The executor app's tasks on the test's App; children build theirs from the env."""
    create_executions_table(admin, app.schema)
    monkeypatch.setenv("PGTASKS_DSN", dsn)
    monkeypatch.setenv("PGTASKS_TEST_SCHEMA", app.schema)
    return register_tasks(app)


# -- job threads --


def test_the_job_threads_start_with_a_worker_of_sync_tasks_only(app: App) -> None:
    """Started with the worker, not one per job of the first burst (each start waits for
    its thread, which kept the first claimed jobs waiting); none for async-only apps."""

    @app.task
    def plain() -> None:
        pass

    def job_threads(worker: Any) -> int:
        return len(worker._executor._threads._threads)

    with running_worker(app, concurrency=7) as worker:
        assert job_threads(worker) == 7
        assert finished(plain.delay()).status == "done"
        assert job_threads(worker) == 7

    async_app = App(dsn=app.database.dsn, schema=app.schema)

    @async_app.task(name="plain_async")
    async def plain_async() -> None:
        pass

    try:
        with running_worker(async_app, concurrency=7) as worker:
            assert job_threads(worker) == 0
            assert finished(plain_async.delay()).status == "done"
            assert job_threads(worker) == 0
    finally:
        async_app.close()


# -- routing --


def test_runs_each_task_on_its_executor_and_queues_may_choose_one(app: App, tasks: Tasks) -> None:
    with running_worker(
        app, app_path=APP_PATH, processes=1, queue_executors={"cpu": "process"}
    ) as worker:
        in_child = finished(tasks.pid.delay()).result
        in_thread = finished(tasks.thread_pid.delay()).result
        by_queue = finished(tasks.queue_routed_pid.delay()).result
        by_other_queue = finished(tasks.queue_routed_pid.apply_async(queue="default")).result
        children = worker.child_pids

    assert in_child in children
    assert in_thread == os.getpid()
    assert by_queue in children, "the cpu queue runs sync tasks in the process pool"
    assert by_other_queue == os.getpid(), "other queues keep the worker's default (thread)"


def test_the_pool_option_sends_sync_tasks_without_an_executor_to_processes(
    app: App, tasks: Tasks
) -> None:
    with running_worker(app, app_path=APP_PATH, processes=1, pool="process") as worker:
        row = finished(tasks.queue_routed_pid.delay())
        assert row.result in worker.child_pids
        assert finished(tasks.thread_pid.delay()).result == os.getpid(), "executor= wins"


def test_a_job_waiting_for_a_slot_of_its_executor_starts_its_timeout_when_it_starts(
    app: App, tasks: Tasks
) -> None:
    @app.task(timeout=0.7, max_attempts=1)
    def nap() -> str:
        time.sleep(0.4)
        return "rested"

    # One thread slot and one child: a claim may bring two thread jobs, one waits.
    with running_worker(app, app_path=APP_PATH, concurrency=1, processes=1):
        handles = nap.delay_many([{}, {}])
        rows = [finished(handle) for handle in handles]

    assert rows[0].locked_at == rows[1].locked_at, "one claim brought both"
    assert [(row.status, row.result) for row in rows] == [(JobStatus.DONE, "rested")] * 2


# -- children and the database --


def test_a_task_in_a_spawned_child_can_enqueue_another_job(app: App, tasks: Tasks) -> None:
    with running_worker(app, app_path=APP_PATH, processes=1) as worker:
        parent = finished(tasks.enqueue_pid.delay())
        assert parent.status is JobStatus.DONE, parent.last_error
        child_job = finished(app.get_job(parent.result))
        children = worker.child_pids

    assert child_job.status is JobStatus.DONE
    assert child_job.result in children


def test_forked_children_open_their_own_pool_and_leave_the_parents_alone(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task(executor="process")
    def report_pid() -> int:
        return os.getpid()

    @app.task(executor="process")
    def fan_out(count: int) -> list[int]:
        return [report_pid.delay().id for _ in range(count)]

    # The parent's pool is open (and holds connections) when the children fork.
    warm_up = report_pid.delay()
    parent_pool = app.database.get_pool()
    parent_sessions = {conn.info.backend_pid for conn in parent_pool._pool}
    assert parent_sessions
    with running_worker(app, processes=2, process_start_method="fork") as worker:
        row = finished(fan_out.delay(3))
        assert row.status is JobStatus.DONE, row.last_error
        spawned = [finished(app.get_job(job_id)) for job_id in row.result]
        assert finished(warm_up).status is JobStatus.DONE
        children = set(worker.child_pids)

    assert {job.status for job in spawned} == {JobStatus.DONE}
    assert {job.result for job in spawned} <= children
    # No child closed or used the parent's sessions: they are all still open, and the
    # parent's pool is the same object.
    alive = select(
        admin,
        app,
        "SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)",
        [list(parent_sessions)],
    )
    assert {row[0] for row in alive} == parent_sessions
    assert app.database.get_pool() is parent_pool
    assert finished(app.get_job(warm_up.id)).result in children


def test_spawn_without_an_importable_app_path_is_refused_with_advice(app: App) -> None:
    @app.task(executor="process")
    def crunch() -> None: ...

    worker = Worker(app, processes=1, poll_interval=0.1)
    with pytest.raises(ConfigurationError, match=r"app_path=.*process_start_method='fork'"):
        worker.run()


def test_a_process_task_missing_from_the_childrens_app_is_refused_by_name(
    app: App, tasks: Tasks
) -> None:
    @app.task(executor="process", name="only_in_the_worker")
    def only_in_the_worker() -> None: ...

    worker = Worker(app, app_path=APP_PATH, processes=1, poll_interval=0.1)
    with pytest.raises(ConfigurationError, match="only_in_the_worker"):
        worker.run()


def test_a_child_that_cannot_import_the_app_stops_the_worker_from_starting(
    app: App, tasks: Tasks
) -> None:
    worker = Worker(app, app_path="tests.apps.no_such_module:app", processes=1)
    before = set(threading.enumerate())
    with pytest.raises(ConfigurationError, match="no_such_module"):
        worker.run()
    # The job threads it started before the pool failed are stopped again.
    wait_until(
        lambda: (
            not [
                thread
                for thread in threading.enumerate()
                if thread not in before and thread.name.startswith("pgtasks-job")
            ]
        ),
        timeout=5,
        message="the job threads of the worker that did not start to end",
    )


# -- hard limits and child death --


def test_a_hard_timeout_kills_a_spinning_child_and_the_next_job_gets_a_fresh_one(
    app: App, tasks: Tasks, admin: psycopg.Connection[Any]
) -> None:
    with running_worker(app, app_path=APP_PATH, processes=1) as worker:
        first_child = worker.child_pids
        started = time.monotonic()
        spun = finished(tasks.spin.delay())
        elapsed = time.monotonic() - started
        after = finished(tasks.pid.delay())

    assert spun.status is JobStatus.FAILED
    assert spun.last_error is not None
    assert "TimeoutError: the task did not finish within its timeout of 0.5 s" in spun.last_error
    assert "signal 15 (SIGTERM)" in spun.last_error
    [(attempt, victim)] = recorded_runs(admin, app, spun.id)
    assert (attempt, [victim]) == (1, first_child)
    assert not is_alive(victim)
    assert after.result != victim, "the next job ran in a fresh child"
    assert elapsed < 3.0, f"the timeout took {elapsed:.2f} s to record"


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(app: App, tasks: Tasks) -> None:
    with running_worker(app, app_path=APP_PATH, processes=1):
        started = time.monotonic()
        row = finished(tasks.stubborn.delay())
        elapsed = time.monotonic() - started

    assert row.status is JobStatus.FAILED
    assert row.last_error is not None
    assert "within its timeout of 0.3 s" in row.last_error
    assert "signal 9 (SIGKILL)" in row.last_error
    assert 0.3 + 2.0 <= elapsed < 0.3 + 2.0 + 2.0


def test_a_child_killed_mid_job_costs_one_attempt_and_is_replaced(
    app: App, tasks: Tasks, admin: psycopg.Connection[Any]
) -> None:
    with running_worker(app, app_path=APP_PATH, processes=2) as worker:
        job = tasks.sleep.delay(30.0, retry_seconds=0.0)
        wait_until(lambda: recorded_runs(admin, app, job.id), message="the first attempt to start")
        [(_, victim)] = recorded_runs(admin, app, job.id)
        os.kill(victim, signal.SIGKILL)
        row = finished(job)
        wait_until(
            lambda: len(worker.child_pids) == 2 and victim not in worker.child_pids,
            message="the pool to be back to two children",
        )

    assert (row.status, row.attempts, row.result) == (JobStatus.DONE, 2, 2)
    assert row.last_error is not None
    assert (
        f"WorkerLostError: worker child {victim} exited with signal 9 (SIGKILL) while running"
        " this attempt"
    ) in row.last_error
    runs = recorded_runs(admin, app, job.id)
    assert [attempt for attempt, _ in runs] == [1, 2]
    assert runs[1][1] != victim


def test_max_tasks_per_child_replaces_each_child_after_that_many_jobs(
    app: App, tasks: Tasks
) -> None:
    with running_worker(app, app_path=APP_PATH, processes=1, max_tasks_per_child=2):
        rows = [finished(handle) for handle in tasks.pid.delay_many([{}] * 5)]

    per_child = Counter(row.result for row in rows)
    assert sorted(per_child.values()) == [1, 2, 2], per_child


def test_max_memory_per_child_replaces_a_child_whose_memory_grew_past_it(
    app: App, tasks: Tasks
) -> None:
    with running_worker(app, app_path=APP_PATH, processes=1, max_memory_per_child=300):
        below = finished(tasks.leak.delay(150)).result
        above = finished(tasks.leak.delay(320)).result
        following = finished(tasks.pid.delay()).result

    assert below["rss"] < 300 <= above["rss"]
    assert below["pid"] == above["pid"], "a child under the limit is kept"
    assert following != above["pid"], "the child over the limit was replaced after its job"


def test_cancelling_a_job_running_in_a_child_reaches_its_context(
    app: App, tasks: Tasks, admin: psycopg.Connection[Any]
) -> None:
    with running_worker(app, app_path=APP_PATH, processes=1):
        job = tasks.cancellable.delay()
        wait_until(lambda: recorded_runs(admin, app, job.id), message="the job to start")
        assert app.cancel(job.id).outcome == "requested"
        row = finished(job)

    assert row.status is JobStatus.CANCELLED
    assert row.attempts == 1


def test_log_records_of_task_code_in_a_child_reach_the_workers_handlers(
    app: App, tasks: Tasks, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING), running_worker(app, app_path=APP_PATH, processes=1):
        job = tasks.chatty.delay()
        child = finished(job).result

    [record] = [r for r in caplog.records if r.name == "executor_app"]
    assert record.getMessage() == f"hello from child {child}"
    assert (record.process, record.levelname) == (child, "WARNING")
    assert (vars(record)["job_id"], vars(record)["task"]) == (job.id, "executor_app.chatty")


# -- soft limits --


def test_a_soft_timeout_raises_inside_a_task_in_a_child(app: App, tasks: Tasks) -> None:
    with running_worker(app, app_path=APP_PATH, processes=2):
        caught = finished(tasks.soft_spin.delay())
        started = time.monotonic()
        interrupted = finished(tasks.soft_sleep.delay())
        elapsed = time.monotonic() - started

    assert caught.status is JobStatus.DONE
    assert caught.result.startswith("caught after 0.3")
    assert interrupted.status is JobStatus.FAILED
    assert interrupted.last_error is not None
    assert "SoftTimeLimitExceeded: the task ran past its soft time limit of 0.3 s" in (
        interrupted.last_error
    )
    assert elapsed < 3.0, "SIGALRM interrupts time.sleep in a child"


def test_a_soft_timeout_raises_inside_a_task_in_a_thread(app: App) -> None:
    @app.task(soft_timeout=0.2)
    def crunch() -> str:
        started = time.monotonic()
        try:
            while True:
                pass
        except SoftTimeLimitExceeded:
            return f"caught after {time.monotonic() - started:.1f} s"

    @app.task
    def after() -> str:
        return "the thread pool is fine"

    with running_worker(app, concurrency=1):
        row = finished(crunch.delay())
        follow_up = finished(after.delay())

    # Raised at the soft timeout, not before; later on a loaded machine (no exact time).
    assert row.status == JobStatus.DONE and row.result.startswith("caught after "), row
    assert float(row.result.split()[2]) >= 0.2, row.result
    assert follow_up.result == "the thread pool is fine"


def test_a_thread_blocked_in_a_c_call_gets_its_soft_timeout_only_when_the_call_returns(
    app: App,
) -> None:
    @app.task(soft_timeout=0.2, max_attempts=1)
    def nap() -> None:
        time.sleep(1.0)  # the exception waits for the sleep to end
        time.sleep(5.0)  # ... and lands before this one

    with running_worker(app, concurrency=1):
        started = time.monotonic()
        row = finished(nap.delay())
        elapsed = time.monotonic() - started

    assert row.status is JobStatus.FAILED
    assert row.last_error is not None
    assert "SoftTimeLimitExceeded" in row.last_error
    assert 1.0 <= elapsed < 3.0


# -- the event loop --


def test_a_blocking_call_inside_a_coroutine_is_logged_with_the_task_name(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task
    async def fetch_report() -> str:
        time.sleep(0.8)  # blocks the loop: every coroutine waits
        await asyncio.sleep(0)
        return "done"

    with (
        caplog.at_level(logging.WARNING, logger="pgtasks.worker"),
        running_worker(app, loop_lag_threshold=0.2),
    ):
        handle = fetch_report.delay()
        row = finished(handle)

    assert row.status is JobStatus.DONE
    warnings = [r.getMessage() for r in caplog.records if "event loop blocked" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert f"{fetch_report.name} (job {handle.id})" in warnings[0]
    assert "a blocking call inside a coroutine?" in warnings[0]
    assert "in fetch_report)" in warnings[0]


def test_an_async_timeout_cancels_the_coroutine_and_the_loop_carries_on(app: App) -> None:
    cancelled = threading.Event()

    @app.task(timeout=0.2, max_attempts=1)
    async def stuck() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    @app.task
    async def quick() -> int:
        return 1

    with running_worker(app):
        row = finished(stuck.delay())
        assert finished(quick.delay()).result == 1

    assert cancelled.is_set()
    assert row.status is JobStatus.FAILED
    assert row.last_error is not None
    assert "TimeoutError" in row.last_error


def test_async_jobs_awaiting_at_once_each_get_a_runner_up_to_the_slots(app: App) -> None:
    """Async jobs run on runners (one per slot at most) that take job after job: jobs that
    await spread over the runners, so as many run at once as there are slots."""
    waiting: list[int] = []
    all_in = threading.Event()

    @app.task
    async def rendezvous(n: int) -> int:
        waiting.append(n)
        if len(waiting) == 5:
            all_in.set()
        # Returns only once all five await at the same time (each on a runner of its own).
        while not all_in.is_set():
            await asyncio.sleep(0.01)
        return n

    handles = [rendezvous.delay(n) for n in range(5)]
    with running_worker(app, concurrency=5, prefetch=0):
        rows = [finished(handle) for handle in handles]

    assert [row.result for row in rows] == list(range(5))


def test_a_cancelled_async_job_leaves_its_runner_to_the_next_job_uncancelled(app: App) -> None:
    """The job cancelled is the one cancelled: the next job on the same runner (one slot)
    runs to the end, and asyncio.timeout() in it works as in a task of its own."""
    started = threading.Event()

    @app.task
    async def forever() -> None:
        started.set()
        await asyncio.sleep(60)

    @app.task
    async def timed(seconds: float) -> str:
        try:
            async with asyncio.timeout(seconds):
                await asyncio.sleep(0.05)
        except TimeoutError:
            return "timed out"
        return f"slept, cancelling={asyncio.current_task().cancelling()}"  # type: ignore[union-attr]

    cancelled = forever.delay()
    with running_worker(app, concurrency=1, prefetch=0):
        assert started.wait(10)
        app.cancel(cancelled.id)
        assert finished(cancelled).status is JobStatus.CANCELLED
        assert finished(timed.delay(5.0)).result == "slept, cancelling=0"
        assert finished(timed.delay(0.001)).result == "timed out"
        assert finished(timed.delay(5.0)).result == "slept, cancelling=0"


# -- shutdown --


def test_stop_releases_jobs_waiting_for_a_child_at_once_and_kills_busy_children(
    app: App, tasks: Tasks, admin: psycopg.Connection[Any], tmp_path: Any
) -> None:
    never = str(tmp_path / "never")
    with running_worker(app, app_path=APP_PATH, processes=1) as worker:
        running, waiting = tasks.hold.delay(never), tasks.hold.delay(never)
        wait_until(
            lambda: recorded_runs(admin, app, running.id) or recorded_runs(admin, app, waiting.id),
            message="one job to start",
        )
        [child] = worker.child_pids
        stopping = time.monotonic()
        worker.stop(timeout=0.3)
        elapsed = time.monotonic() - stopping

    rows = app.get_jobs([running.id, waiting.id])
    assert [(row.status, row.attempts) for row in rows] == [(JobStatus.PENDING, 0)] * 2
    assert not is_alive(child)
    assert elapsed < 0.3 + 3.0, f"stop took {elapsed:.2f} s"
    assert worker.counts.get("released") == 2


# -- validation --


def test_option_combinations_no_executor_can_honour_are_refused_at_registration(
    make_app: Callable[..., App],
) -> None:
    app = make_app(migrate=False)

    async def coroutine() -> None: ...

    def function() -> None: ...

    cases: list[tuple[Callable[..., Any], dict[str, Any], str]] = [
        (coroutine, {"executor": "process"}, "is an async def .* needs a plain def"),
        (coroutine, {"executor": "thread"}, "is an async def"),
        (function, {"executor": "async"}, "needs an async def"),
        (function, {"executor": "gpu"}, "executor= must be one of thread, process, async"),
        (coroutine, {"soft_timeout": 1}, "soft_timeout= applies to sync tasks"),
        (function, {"soft_timeout": 5, "timeout": 5}, "must be shorter than timeout="),
        (function, {"soft_timeout": 0}, "soft_timeout= must be a positive number"),
    ]
    for function_, options, message in cases:
        with pytest.raises(TaskRegistrationError, match=message):
            register: Callable[[Callable[..., Any]], Any] = app.task(name="bad", **options)
            register(function_)


def test_bad_worker_executor_options_are_refused_with_clear_errors(
    make_app: Callable[..., App],
) -> None:
    app = make_app(migrate=False)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"pool": "greenlet"}, "pool= must be 'thread' or 'process'"),
        ({"queue_executors": {"io": "async"}}, r"queue_executors\['io'\] must be"),
        ({"process_start_method": "forkserver"}, "must be 'spawn' or 'fork'"),
        ({"processes": 0}, "processes= must be an int >= 1"),
        ({"max_tasks_per_child": 0}, "max_tasks_per_child= must be an int >= 1"),
        ({"max_memory_per_child": -1}, "max_memory_per_child= must be a positive number"),
        ({"app_path": "no_colon"}, "app_path= must look like module:attribute"),
    ]
    for options, message in cases:
        with pytest.raises(ConfigurationError, match=message):
            Worker(app, **options)
