"""Job metadata: meta through every enqueue path, ctx.meta, progress and meta updates from
thread, async and process tasks (fenced by the lease), and the attempt history (retries, a
SIGKILLed worker subprocess rescued). Real PostgreSQL, real workers and children.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgtasks import (
    App,
    Beat,
    JobContext,
    JobStatus,
    LeaseLostError,
    PayloadNotSerializableError,
    ReservedMetaKeyError,
    TaskRegistrationError,
    Worker,
)
from tests.apps.meta_app import Tasks, register_tasks
from tests.support.cli import cli_runner
from tests.support.inprocess import execute, finished, running_worker, select
from tests.support.processes import Processes
from tests.support.waiting import wait_until

APP_PATH = "tests.apps.meta_app:app"
QUICK_RESCUE: dict[str, Any] = {
    "lease_timeout": 1.0,
    "heartbeat_interval": 0.2,
    "rescue_interval": 0.2,
}


@pytest.fixture
def tasks(app: App, dsn: str, monkeypatch: pytest.MonkeyPatch) -> Tasks:
    """The meta app's tasks on the test's App; children build theirs from the env."""
    monkeypatch.setenv("PGTASKS_DSN", dsn)
    monkeypatch.setenv("PGTASKS_TEST_SCHEMA", app.schema)
    return register_tasks(app)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    running = Processes(tmp_path, APP_PATH)
    yield running
    running.close()


def meta_worker(app: App, **options: Any) -> contextlib.AbstractContextManager[Worker]:
    """An in-process worker whose process-pool children import the meta app."""
    return running_worker(app, app_path=APP_PATH, processes=1, **options)


def job_count(admin: psycopg.Connection[Any], app: App) -> int:
    return int(select(admin, app, "SELECT count(*) FROM {schema}.all_jobs")[0][0])


# -- enqueue ------------------------------------------------------------------------------------


def test_meta_round_trips_through_every_enqueue_path_to_the_handle_and_the_context(
    app: App, tasks: Tasks, dsn: str
) -> None:
    echo = tasks.echo_meta
    handles = {
        "own transaction": echo.apply_async(meta={"path": "single"}),
        "idempotency key": echo.apply_async(idempotency_key="k1", meta={"path": "keyed"}),
        "no meta": echo.delay(),
        "empty meta": echo.apply_async(meta={}),
    }
    with psycopg.connect(dsn) as conn:  # a transaction of the caller's
        handles["connection"] = echo.apply_async(meta={"path": "transaction"}, connection=conn)
        [handles["bulk in connection"], _] = echo.delay_many(
            [{}, {}], meta={"path": "bulk-transaction"}, connection=conn
        )
    first, second, third = echo.delay_many([{}, {}, {}], meta={"path": "bulk", "n": [1, 2]})
    handles["bulk"] = second
    mixed = app.enqueue_many(
        [
            echo.build_spec(meta={"path": "mixed-keyed"}, idempotency_key="k2"),
            echo.build_spec(),
            echo.build_spec(meta={"path": "mixed"}),
        ]
    )
    handles["bulk keyed"], handles["bulk without"], handles["bulk mixed"] = mixed
    handles["async"] = asyncio.run(echo.aapply_async(meta={"path": "async"}))

    expected = {
        "own transaction": {"path": "single"},
        "idempotency key": {"path": "keyed"},
        "no meta": {},
        "empty meta": {},
        "connection": {"path": "transaction"},
        "bulk in connection": {"path": "bulk-transaction"},
        "bulk": {"path": "bulk", "n": [1, 2]},
        "bulk keyed": {"path": "mixed-keyed"},
        "bulk without": {},
        "bulk mixed": {"path": "mixed"},
        "async": {"path": "async"},
    }
    assert {name: handle.refresh().meta for name, handle in handles.items()} == expected
    assert first.refresh().meta == third.refresh().meta == expected["bulk"]

    with meta_worker(app):
        seen = {name: finished(handle).result for name, handle in handles.items()}
    assert seen == expected


def test_beat_enqueues_the_meta_of_its_schedule(
    app: App, admin: psycopg.Connection[Any], dsn: str
) -> None:
    @app.task(name="meta.tick")
    def tick() -> None: ...

    app.add_periodic(tick, every=timedelta(seconds=1), name="ticking", meta={"kind": "periodic"})
    beat = Beat(app)
    with psycopg.connect(dsn, autocommit=True) as conn:
        beat.run_pass(conn)  # the first pass records the schedule
        execute(
            admin,
            app,
            "UPDATE {schema}.periodic SET processed_until = processed_until - interval '1.5 s'",
        )
        result = beat.run_pass(conn)
    assert result.enqueued
    metas = {app.get_job(item.job_id).meta["kind"] for item in result.enqueued}
    assert metas == {"periodic"}
    with pytest.raises(TaskRegistrationError, match="reserved"):
        app.add_periodic(tick, every=timedelta(seconds=1), name="bad", meta={"pgtasks.x": 1})


@pytest.mark.parametrize(
    ("meta", "error", "text"),
    [
        ({"pgtasks.progress": 1}, ReservedMetaKeyError, "reserved"),
        ({"ok": 1, "pgtasks.trace": {}}, ReservedMetaKeyError, "'pgtasks.trace'"),
        ({"when": object()}, PayloadNotSerializableError, "meta['when']"),
        ({1: "x"}, PayloadNotSerializableError, "not a string"),
        ({"nan": float("nan")}, PayloadNotSerializableError, "meta['nan']"),
        ([("a", 1)], PayloadNotSerializableError, "must be a mapping"),
        ("text", PayloadNotSerializableError, "must be a mapping"),
    ],
)
def test_bad_meta_is_refused_before_anything_is_written(
    app: App, tasks: Tasks, admin: psycopg.Connection[Any], meta: Any, error: type, text: str
) -> None:
    with pytest.raises(error, match=None) as raised:
        tasks.echo_meta.apply_async(meta=meta)
    assert text in str(raised.value)
    with pytest.raises(error):
        tasks.echo_meta.delay_many([{}, {}], meta=meta)
    assert job_count(admin, app) == 0


def test_the_database_refuses_meta_that_is_not_an_object(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    with pytest.raises(psycopg.errors.CheckViolation):
        execute(
            admin,
            app,
            "INSERT INTO {schema}.jobs (task_name, queue, args, kwargs, max_attempts, meta)"
            " VALUES ('t', 'default', '[]', '{{}}', 1, '[1]')",
        )


def test_a_context_refuses_reserved_keys_and_bad_progress_before_writing() -> None:
    writes: list[dict[str, Any]] = []
    context = JobContext(
        job_id=1,
        task_name="t",
        attempt=1,
        max_attempts=1,
        worker_id=1,
        queue="default",
        _write_meta=writes.append,
    )
    with pytest.raises(ReservedMetaKeyError, match="set_progress"):
        context.update_meta({"pgtasks.progress": {}})
    with pytest.raises(ValueError, match="finite"):
        context.set_progress(float("inf"), 10)
    with pytest.raises(TypeError, match="message"):
        context.set_progress(1, 10, message=3)  # type: ignore[arg-type]
    assert writes == []
    context.update_meta({"a": 1}, b=2)
    context.set_progress(2, 5, "two")
    assert writes[0] == {"a": 1, "b": 2}
    assert writes[1]["pgtasks.progress"]["current"] == 2


# -- progress and meta updates while running ------------------------------------------------------


@pytest.mark.parametrize(
    ("task_name", "stage", "current", "total"),
    [
        ("thread_progress", "thread", 3, 10),
        ("async_progress", "async", 1, 4),
        ("process_progress", "process", 7, 10),
    ],
)
def test_progress_and_meta_written_by_a_running_task_are_visible_from_its_handle(
    app: App, tasks: Tasks, tmp_path: Path, task_name: str, stage: str, current: int, total: int
) -> None:
    release = tmp_path / "release"
    task = getattr(tasks, task_name)
    with meta_worker(app):
        handle = task.apply_async(args=[str(release)], meta={"owner": "test"})
        wait_until(
            lambda: handle.refresh().meta.get("stage") == stage,
            message=f"the {task_name} task to write its meta",
        )
        assert handle.status() is JobStatus.RUNNING
        progress = handle.progress
        assert progress is not None
        assert (progress.current, progress.total) == (current, total)
        assert progress.fraction == current / total
        assert progress.message
        assert progress.updated_at is not None
        assert handle.meta["owner"] == "test"
        release.touch()
        row = finished(handle)
    assert row.status is JobStatus.DONE
    assert row.meta["stage"] == stage
    assert row.progress is not None


def test_a_write_from_an_attempt_that_lost_its_lease_is_refused(
    app: App, admin: psycopg.Connection[Any], tmp_path: Path
) -> None:
    started, release = threading.Event(), threading.Event()
    outcomes: list[str] = []

    @app.task(bind=True)
    def long_job(context: JobContext) -> None:
        context.update_meta(step=1)
        started.set()
        release.wait(30)
        try:
            context.update_meta(step=2)
        except LeaseLostError as error:
            outcomes.append(str(error))
        try:
            context.set_progress(1, 1)
        except LeaseLostError:
            outcomes.append("progress refused")

    with running_worker(app, rescue_interval=60.0):
        handle = long_job.delay()
        assert started.wait(10)
        # What a rescuer does to a lost worker's job: back to pending, lease gone.
        execute(
            admin,
            app,
            "UPDATE {schema}.jobs SET status = 'pending', locked_by = NULL,"
            " run_at = now() + interval '1 hour' WHERE id = %s",
            [handle.id],
        )
        release.set()
        wait_until(lambda: len(outcomes) == 2, message="the stale writes to be refused")
    assert f"job {handle.id}" in outcomes[0]
    assert "no longer holds" in outcomes[0]
    assert outcomes[1] == "progress refused"
    assert handle.refresh().meta == {"step": 1}
    assert handle.progress is None


def test_a_task_called_directly_may_report_progress_without_a_job(tasks: Tasks) -> None:
    assert tasks.echo_meta() == {}


# -- attempt history ----------------------------------------------------------------------------


def test_the_attempt_history_records_each_failed_attempt(app: App, tasks: Tasks) -> None:
    with meta_worker(app) as worker:
        handle = tasks.flaky.delay()
        row = finished(handle)
    assert row.status is JobStatus.DONE
    assert row.result == 3
    history = handle.refresh().attempts_history
    assert [entry.attempt for entry in history] == [1, 2]
    assert [entry.exception_type for entry in history] == [
        "builtins.ValueError",
        "pgtasks._retry.Retry",
    ]
    assert {entry.worker_id for entry in history} == {worker.worker_id}
    assert "first attempt fails" in (history[0].error or "")
    assert "Traceback" in (history[0].error or "")
    assert all(entry.finished_at is not None for entry in history)
    assert handle.worker_id == worker.worker_id  # the successful attempt's worker
    assert handle.started_at is not None
    assert handle.started_at <= history[0].finished_at  # type: ignore[operator]


def test_a_job_that_succeeds_at_once_has_no_history(app: App, tasks: Tasks) -> None:
    with meta_worker(app):
        row = finished(tasks.echo_meta.delay())
    assert row.attempt_errors is None
    assert row.attempts_history == []
    assert row.started_at is not None


def test_the_history_records_the_attempt_of_a_sigkilled_worker_and_jobs_show_lists_it(
    app: App, tasks: Tasks, dsn: str, processes: Processes, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    victim = processes.worker(dsn, app.schema, "--concurrency=1")
    victim_id = victim.worker_id()
    handle = tasks.hold.apply_async(args=[str(release)], meta={"batch": 7})
    wait_until(
        lambda: handle.status() is JobStatus.RUNNING, message="the worker subprocess to start it"
    )
    victim.send(signal.SIGKILL)
    assert victim.wait_exit(5) == -signal.SIGKILL
    release.touch()
    with meta_worker(app, **QUICK_RESCUE) as worker:
        row = finished(handle, timeout=15)
    assert row.status is JobStatus.DONE
    assert row.result == 2
    [lost] = row.attempts_history
    assert lost.attempt == 1
    assert lost.worker_id == victim_id
    assert lost.exception_type == "pgtasks.WorkerLostError"
    assert "was lost" in (lost.error or "")
    assert row.locked_by == worker.worker_id

    shown = cli_runner(app, APP_PATH)("jobs", "show", str(handle.id))
    assert shown.returncode == 0, shown.stderr
    assert '"batch": 7' in shown.stdout
    assert "started at:" in shown.stdout
    attempt = next(line for line in shown.stdout.splitlines() if f"#1 worker {victim_id}" in line)
    # The exception is named once: the stored error text starts with it.
    assert attempt.count("WorkerLostError") == 1
    assert f"WorkerLostError: worker {victim_id} was lost" in attempt
