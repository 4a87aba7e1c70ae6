"""Durable steps, sleeps, snoozes and waits for events in real ``pgtasks worker``
processes (tests/apps/durable_app.py): checkpoints replayed on retries, step retries, an
exactly-once step in the checkpoint's transaction, the parked states, events emitted in
(and rolled back with) a caller's transaction, versions, hostile input.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgtasks import (
    App,
    JobSpec,
    JobStatus,
    PayloadNotSerializableError,
    TaskFailed,
    TaskRegistrationError,
)
from tests.apps.durable_app import Tasks, create_effects_table, effects, register_tasks
from tests.support.processes import ChildProcess, Processes
from tests.support.schemas import SchemaAdmin
from tests.support.servers import app_connection_options
from tests.support.waiting import wait_until

APP_PATH = "tests.apps.durable_app:app"


@pytest.fixture(scope="module")
def shared(
    dsn: str, schema_admin: SchemaAdmin, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[App, Tasks, ChildProcess]]:
    """One app, schema and worker (concurrency 4) for the tests that only run jobs and
    check them by id: they share the worker's start. Tests that start workers of their
    own, or run tasks in this process, take ``own_tasks``."""
    schema = schema_admin.take_migrated()
    app_dsn, connections = app_connection_options(dsn)
    app = App(app_dsn, schema=schema, connect_timeout=3.0, **connections)
    processes = Processes(tmp_path_factory.mktemp("durable-worker"), APP_PATH)
    try:
        app.check_schema()
        with psycopg.connect(dsn, autocommit=True) as conn:
            create_effects_table(conn, schema)
        tasks = register_tasks(app)
        yield app, tasks, processes.worker(dsn, schema, "--concurrency=4")
    finally:
        processes.close()
        app.close()
        schema_admin.drop_later(schema)


@pytest.fixture
def app(shared: tuple[App, Tasks, ChildProcess]) -> App:
    return shared[0]


@pytest.fixture
def tasks(shared: tuple[App, Tasks, ChildProcess]) -> Tasks:
    return shared[1]


@pytest.fixture
def worker(shared: tuple[App, Tasks, ChildProcess]) -> ChildProcess:
    return shared[2]


@pytest.fixture
def own_tasks(make_app: Callable[..., App], dsn: str, monkeypatch: pytest.MonkeyPatch) -> Tasks:
    """The durable tasks on an app and schema of their own (no worker)."""
    own = make_app()
    monkeypatch.setenv("PGTASKS_DSN", dsn)
    monkeypatch.setenv("PGTASKS_TEST_SCHEMA", own.schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        create_effects_table(conn, own.schema)
    return register_tasks(own)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    running = Processes(tmp_path, APP_PATH)
    yield running
    running.close()


def test_steps_replay_on_retry_and_run_once(
    app: App, dsn: str, tasks: Tasks, worker: ChildProcess
) -> None:
    handle = tasks.five_steps.delay(fail_once=True)
    assert handle.get(timeout=30) == 150
    assert handle.attempts == 2
    # Steps 1-3 ran on the 1st attempt and were replayed; 4-5 ran once, on the 2nd.
    assert effects(dsn, app.schema, handle.id) == [
        ("step1", 1),
        ("step2", 1),
        ("step3", 1),
        ("step4", 2),
        ("step5", 2),
    ]
    steps = app.get_job_steps(handle.id)  # moved into the history row with the job
    assert [(step["name"], step["status"], step["result"]) for step in steps] == [
        (f"step{n}", "done", n * 10) for n in range(1, 6)
    ]
    assert handle.fetch().status is JobStatus.DONE


def test_occurrences_in_a_loop_and_async_steps(
    app: App, dsn: str, tasks: Tasks, worker: ChildProcess
) -> None:
    loop = tasks.loop_steps.delay(3)
    coroutine = tasks.async_steps.delay()
    assert loop.get(timeout=30) == [0, 1, 2]
    assert coroutine.get(timeout=30) == 3
    assert effects(dsn, app.schema, loop.id) == [("item0", 1), ("item1", 1), ("item2", 1)]
    assert [row["occurrence"] for row in app.get_job_steps(loop.id)] == [1, 2, 3]
    assert effects(dsn, app.schema, coroutine.id) == [("part1", 1), ("part2", 1)]


def test_step_retries_and_final_error(
    app: App, dsn: str, tasks: Tasks, worker: ChildProcess
) -> None:
    flaky = tasks.flaky_step.delay(2)
    assert flaky.get(timeout=30) == "ok after 3"
    assert flaky.attempts == 1  # the step's tries, not the task's attempts
    failing = tasks.failing_step.delay()
    with pytest.raises(TaskFailed, match="StepFailed"):
        failing.get(timeout=30)
    # The 1st attempt's error was retried by the task; the 2nd (last) one is recorded.
    assert effects(dsn, app.schema, failing.id) == [("boom", 1), ("boom", 2)]
    [step] = app.get_job_steps(failing.id)
    assert step["status"] == "failed" and "ValueError: boom" in step["error"]


def test_a_database_step_commits_with_its_checkpoint(
    app: App, dsn: str, tasks: Tasks, worker: ChildProcess
) -> None:
    handle = tasks.db_step.delay()
    token = handle.get(timeout=30)
    assert token == f"pgtasks:{handle.id}:write:1"
    assert effects(dsn, app.schema, handle.id) == [("write", 1)]


def test_durable_sleep_parks_without_an_attempt(
    app: App, dsn: str, tasks: Tasks, worker: ChildProcess
) -> None:
    handle = tasks.sleeper.delay(1.5)

    def sleeping() -> bool:
        row = handle.fetch()
        return row.status is JobStatus.PENDING and "pgtasks.parked" in row.meta

    wait_until(sleeping, timeout=20, message="the job parked")
    row = handle.fetch()
    assert row.attempts == 0 and row.meta["pgtasks.parked"]["kind"] == "sleep"
    assert app.count_parked_jobs() == {"default": {"sleeping": 1}}
    assert handle.get(timeout=30) == "woke"
    assert handle.attempts == 1
    assert effects(dsn, app.schema, handle.id) == [("before", 1), ("after", 1)]
    names = [step["name"] for step in app.get_job_steps(handle.id)]
    assert names == ["before", "pgtasks.sleep", "after"]


def test_snooze_uses_no_attempt(app: App, tasks: Tasks, worker: ChildProcess) -> None:
    handle = tasks.snoozer.delay(2)  # max_attempts=1: a Retry would fail it
    assert handle.get(timeout=30) == 1
    assert handle.fetch().meta["snoozes"] == 2


def test_events_wake_waiters_in_the_emitters_transaction(
    app: App, dsn: str, tasks: Tasks, worker: ChildProcess
) -> None:
    early_id = app.emit_event("order:1:paid", {"early": True})  # before the wait: found
    early = tasks.waiter.delay("order:1:paid")
    assert early.get(timeout=30) == {"early": True}
    assert early_id > 0

    waiters = [tasks.waiter.delay("order:2:paid") for _ in range(3)]
    wait_until(
        lambda: app.count_parked_jobs().get("default", {}).get("waiting") == 3,
        timeout=20,
        message="three jobs waiting",
    )
    with psycopg.connect(dsn) as conn:  # rolled back: never happened
        app.emit_event("order:2:paid", {"n": 1}, connection=conn)
        conn.rollback()
    assert all(handle.fetch().status is JobStatus.PENDING for handle in waiters)
    with psycopg.connect(dsn) as conn:
        app.emit_event("order:2:paid", {"n": 2}, connection=conn)
        conn.commit()
    assert [handle.get(timeout=30) for handle in waiters] == [{"n": 2}] * 3
    for handle in waiters:
        assert effects(dsn, app.schema, handle.id) == [("before", 1), ("after", 1)]
        assert handle.attempts == 1

    timing_out = tasks.waiter.delay("order:3:paid", timeout=0.5)
    assert timing_out.get(timeout=30) == "timed out"
    twice = tasks.two_waits.delay("k")
    app.emit_event("k", 1)
    asyncio.run(app.aemit_event("k", 2))
    assert twice.get(timeout=30) == [1, 2]  # each wait takes the next event


def test_versions_and_mismatches(dsn: str, own_tasks: Tasks, processes: Processes) -> None:
    tasks = own_tasks
    app = tasks.versioned.app
    old_worker = processes.worker(dsn, app.schema)
    # A job that passes the branch point under the old code, then one parked before it.
    passed = tasks.versioned.delay()
    assert passed.get(timeout=30) == "old"
    parked = tasks.versioned.delay(hold="sleep")
    wait_until(lambda: "pgtasks.parked" in parked.fetch().meta, timeout=20)
    old_worker.stop()
    processes.worker(dsn, app.schema, DURABLE_NEW_CODE="1")
    assert parked.get(timeout=30) == "new"  # it had not passed the marker: new branch
    assert tasks.versioned.delay().get(timeout=30) == "new"
    fork = app.fork_job(passed.id)  # every checkpoint: the old code's path, replayed
    assert fork.get(timeout=30) == "old"
    fresh = app.fork_job(passed.id, from_step="old-price")  # from the branch point: new
    assert fresh.get(timeout=30) == "new"


def test_a_changed_step_order_fails_clearly(
    app: App, dsn: str, tasks: Tasks, worker: ChildProcess
) -> None:
    handle = tasks.five_steps.delay(fail_once=True)
    assert handle.get(timeout=30) == 150
    fork = app.fork_job(handle.id, from_step="step4")
    assert fork.get(timeout=30) == 150
    # Steps 1-3 reused; its 1st attempt fails before step 4 (the same arguments).
    assert effects(dsn, app.schema, fork.id) == [("step4", 2), ("step5", 2)]
    # Checkpoints that no longer match the code (edited by hand here): the job fails.
    bad = app.fork_job(handle.id, from_step="step3")
    garbage = app.fork_job(handle.id, from_step="step3")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "UPDATE {}.job_steps SET name = 'renamed' WHERE job_id = %s AND position = 0"
            ).format(sql.Identifier(app.schema)),
            (bad.id,),
        )
        conn.execute(
            sql.SQL(
                "UPDATE {}.job_steps SET status = 'garbage', result = '{{\"x\": [1]}}'"
                " WHERE job_id = %s AND position = 1"
            ).format(sql.Identifier(app.schema)),
            (garbage.id,),
        )
    with pytest.raises(TaskFailed, match=r"StepMismatchError.*'step1'.*'renamed'"):
        bad.get(timeout=30)
    with pytest.raises(TaskFailed, match="status 'garbage'"):
        garbage.get(timeout=30)
    assert tasks.five_steps.delay().get(timeout=30) == 150  # nothing else stopped


@pytest.mark.parametrize("kind", ["object", "reserved", "long"])
def test_hostile_steps_fail_their_job_only(
    app: App, tasks: Tasks, worker: ChildProcess, kind: str
) -> None:
    bad = tasks.hostile.delay(kind)
    good = tasks.hostile.delay("fine \x01 name ' \" ;")
    with pytest.raises(TaskFailed) as failure:
        bad.get(timeout=30)
    assert "Step" in str(failure.value) or "step" in str(failure.value)
    assert bad.attempts == 1  # a StepError is not retried
    assert good.get(timeout=30) == "fine \x01 name ' \" ;"


def test_direct_calls_run_steps_in_place(own_tasks: Tasks) -> None:
    tasks = own_tasks
    app = tasks.flaky_step.app
    assert tasks.flaky_step(0) == "ok after 1"
    assert tasks.sleeper(86400.0) == "woke"  # no job to park: returns at once
    with pytest.raises(RuntimeError, match="needs a job run by a worker"):
        tasks.waiter("key")
    with pytest.raises(ValueError, match="event key"):
        app.emit_event("")
    with pytest.raises(PayloadNotSerializableError, match="cannot be stored as JSON"):
        app.emit_event("key", object())


def test_aliases_run_jobs_enqueued_under_an_old_name(
    app: App, tasks: Tasks, worker: ChildProcess
) -> None:
    # Enqueued by the code before the rename (a job row of the old name).
    old = JobSpec("durable.old_name", "default", 0, "[41]", "{}", 3)
    handle = app.enqueue(old)
    assert handle.get(timeout=30) == 42
    assert app.tasks["durable.old_name"] is app.tasks["durable.renamed"]
    with pytest.raises(TaskRegistrationError, match="already registered"):
        app.task(name="other", aliases=["durable.renamed"])(lambda: None)
    with pytest.raises(TaskRegistrationError, match="aliases= must be a list"):
        app.task(name="other2", aliases="durable.x")(lambda: None)
