"""Log lines per attempt (pgtasks/_execution/joblogs.py) with real workers: captured from
``logging`` on each executor and from a pool child's stdout and stderr, per attempt,
capped, scrubbed, written while the attempt runs and with its end, and off with
``job_logs=False``."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgtasks import App, JobContext, JobStatus, Retry
from tests.apps.executor_app import Tasks, register_tasks
from tests.apps.worker_app import create_executions_table
from tests.support.inprocess import finished, running_worker, select
from tests.support.waiting import wait_until

APP_PATH = "tests.apps.executor_app:app"
logger = logging.getLogger("shop.tasks")


def lines(meta: dict[str, Any], attempt: int = 1) -> list[list[str]]:
    return [line[1:] for line in meta["pgtasks.logs"][str(attempt)]["lines"]]


def test_a_thread_task_lines_are_stored_with_the_job_and_moved_to_history(app: App) -> None:
    @app.task(name="shop.charge")
    def charge(order: int) -> str:
        logger.warning("charging order %d", order)
        try:
            raise ValueError("card declined")
        except ValueError:
            logger.exception("first try failed")
        logger.error("giving up on order %d", order)
        return "ok"

    @app.task(name="shop.quiet")
    def quiet() -> str:
        return "ok"

    with running_worker(app):
        row = finished(charge.delay(7))
        silent = finished(quiet.delay())

    assert row.status is JobStatus.DONE
    stored = row.meta["pgtasks.logs"]["1"]
    assert stored["dropped"] == 0
    assert [line[1:3] for line in stored["lines"]] == [
        ["WARNING", "shop.tasks"],
        ["ERROR", "shop.tasks"],
        ["ERROR", "shop.tasks"],
    ]
    assert stored["lines"][0][3] == "charging order 7"
    assert stored["lines"][1][3].startswith("first try failed\nTraceback (most recent call last)")
    assert "ValueError: card declined" in stored["lines"][1][3]
    assert isinstance(stored["lines"][0][0], float)  # seconds since the epoch
    assert "pgtasks.logs" not in silent.meta, "a task that logs nothing stores nothing"
    with app.connection() as conn:
        rows = select(
            conn,
            app,
            "SELECT meta -> 'pgtasks.logs' -> '1' -> 'lines' -> 0 ->> 3"
            " FROM {schema}.jobs_history WHERE id = %s",
            [row.id],
        )
    assert rows == [("charging order 7",)]


def test_each_attempt_keeps_its_own_lines(app: App) -> None:
    @app.task(name="shop.flaky", bind=True, max_attempts=3)
    def flaky(context: JobContext) -> int:
        logger.warning("attempt %d starts", context.attempt)
        if context.attempt == 1:
            raise Retry(countdown=0.01)
        return context.attempt

    with running_worker(app):
        row = finished(flaky.delay())

    assert row.result == 2
    assert lines(row.meta, 1) == [["WARNING", "shop.tasks", "attempt 1 starts"]]
    assert lines(row.meta, 2) == [["WARNING", "shop.tasks", "attempt 2 starts"]]


def test_lines_past_the_caps_are_counted_and_a_long_line_is_cut(app: App) -> None:
    @app.task(name="shop.noisy")
    def noisy() -> None:
        logger.warning("x" * 10_000)
        for number in range(500):
            logger.warning("line %d", number)

    with running_worker(app):
        row = finished(noisy.delay())

    stored = row.meta["pgtasks.logs"]["1"]
    assert len(stored["lines"]) == 200
    assert stored["dropped"] == 301
    assert stored["lines"][0][3].endswith("[… 6000 characters cut]")
    assert stored["lines"][-1][3] == "line 198"


def test_passwords_in_lines_are_scrubbed_as_error_texts_are(app: App) -> None:
    @app.task(name="shop.leaky")
    def leaky() -> None:
        logger.warning("connecting to postgresql://shop:hunter2@db.internal/shop")

    with running_worker(app):
        row = finished(leaky.delay())

    [line] = lines(row.meta)
    assert "hunter2" not in line[2]
    assert "***" in line[2]


def test_an_async_task_lines_are_its_own(app: App) -> None:
    @app.task(name="shop.fetch")
    async def fetch(name: str) -> str:
        for step in range(3):
            logger.warning("%s step %d", name, step)
            await asyncio.sleep(0.01)
        return name

    with running_worker(app, concurrency=4):
        handles = [fetch.delay(name) for name in ("a", "b", "c")]
        rows = [finished(handle) for handle in handles]

    for name, row in zip("abc", rows, strict=True):
        assert [line[2] for line in lines(row.meta)] == [f"{name} step {n}" for n in range(3)]


def test_job_logs_off_stores_nothing(app: App) -> None:
    @app.task(name="shop.told")
    def told() -> None:
        logger.warning("not kept")

    with running_worker(app, job_logs=False):
        row = finished(told.delay())

    assert "pgtasks.logs" not in row.meta


def test_lines_are_written_while_the_attempt_runs(app: App) -> None:
    release = threading.Event()

    @app.task(name="shop.long")
    def long_running() -> None:
        logger.warning("halfway")
        release.wait(30)
        logger.warning("finished")

    def stored_while_running() -> bool:
        row = handle.fetch()
        return row.status is JobStatus.RUNNING and "pgtasks.logs" in row.meta

    with running_worker(app, heartbeat_interval=0.2):
        handle = long_running.delay()
        wait_until(stored_while_running, message="the lines so far to be written")
        assert lines(handle.fetch().meta) == [["WARNING", "shop.tasks", "halfway"]]
        release.set()
        row = finished(handle)
    assert [line[2] for line in lines(row.meta)] == ["halfway", "finished"]


@pytest.fixture
def tasks(
    app: App, dsn: str, admin: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> Tasks:
    create_executions_table(admin, app.schema)
    monkeypatch.setenv("PGTASKS_DSN", dsn)
    monkeypatch.setenv("PGTASKS_TEST_SCHEMA", app.schema)
    return register_tasks(app)


def test_a_process_child_lines_and_output_are_captured(app: App, tasks: Tasks) -> None:
    with running_worker(app, app_path=APP_PATH, processes=1):
        row = finished(tasks.chatty.delay())
        printed = finished(tasks.printer.delay())

    assert lines(row.meta) == [["WARNING", "executor_app", f"hello from child {row.result}"]]
    assert lines(printed.meta) == [
        ["stdout", "stdout", "to stdout"],
        ["stderr", "stderr", "to stderr"],
        ["stdout", "stdout", "no newline"],
    ]


def test_a_terminated_process_job_keeps_the_lines_its_child_sent(
    app: App, tasks: Tasks, admin: psycopg.Connection[Any], tmp_path: Path
) -> None:
    with running_worker(app, app_path=APP_PATH, processes=1):
        job = tasks.printer_hold.delay(str(tmp_path / "never"))
        wait_until(
            lambda: select(
                admin, app, "SELECT 1 FROM {schema}.executions WHERE job_id = %s", [job.id]
            ),
            message="the job to start",
        )
        app.cancel(job.id, terminate=True)
        row = finished(job)
    assert row.status is JobStatus.CANCELLED
    assert lines(row.meta) == [["stdout", "stdout", "waiting for the file"]]
