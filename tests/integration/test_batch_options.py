"""Batch tasks with the options of plain tasks, with a real worker: ``timeout=`` (a hard
limit for the handler call), a terminate of one job of a running batch, ``link=``
callbacks and workflow steps (each job's outcome feeds its workflow)."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pgtasks import App, Batch, BatchJob, JobCancelled, TaskFailed, TaskRegistrationError, chain
from tests.support.inprocess import running_worker, select
from tests.support.waiting import wait_until

Connection = psycopg.Connection[Any]
NOW = timedelta(0)


def test_a_batch_past_its_timeout_is_retried_per_policy(app: App, admin: Connection) -> None:
    release = threading.Event()
    calls: list[int] = []

    @app.task(
        name="slow_batch",
        batch=Batch(max_size=10, max_wait=NOW),
        timeout=0.3,
        max_attempts=2,
        retry_backoff=0.01,
        retry_jitter=False,
    )
    def slow_batch(jobs: list[BatchJob]) -> None:
        calls.append(jobs[0].attempt)
        if jobs[0].attempt == 1:
            release.wait(30)  # past its timeout: abandoned
        for job in jobs:
            job.done(job.kwargs["n"])

    handles = slow_batch.delay_many([{"n": n} for n in range(3)])
    try:
        with running_worker(app):
            # Every job timed out at attempt 1, retried and done at attempt 2.
            assert [handle.get(timeout=30) for handle in handles] == [0, 1, 2]
    finally:
        release.set()
    rows = select(
        admin,
        app,
        "SELECT attempts, attempt_errors::text FROM {schema}.all_jobs ORDER BY id",
    )
    assert [attempts for attempts, _ in rows] == [2, 2, 2]
    assert all("TimeoutError" in errors for _, errors in rows)
    assert calls[:2] == [1, 2]


def test_a_batch_past_its_timeout_at_the_last_attempt_fails(app: App) -> None:
    release = threading.Event()

    @app.task(name="stuck_batch", batch=Batch(max_size=5, max_wait=NOW), timeout=0.2)
    def stuck_batch(jobs: list[BatchJob]) -> None:
        release.wait(30)

    handle = stuck_batch.apply_async(kwargs={"n": 1}, max_attempts=1)
    try:
        with running_worker(app), pytest.raises(TaskFailed, match="TimeoutError"):
            handle.get(timeout=30)
    finally:
        release.set()


def test_a_terminated_job_of_a_running_batch_ends_cancelled_the_others_recorded(
    app: App,
) -> None:
    started, release = threading.Event(), threading.Event()

    @app.task(name="held_batch", batch=Batch(max_size=10, max_wait=NOW))
    def held_batch(jobs: list[BatchJob]) -> None:
        started.set()
        release.wait(20)
        for job in jobs:
            job.done(job.kwargs["n"] * 10)

    handles = held_batch.delay_many([{"n": n} for n in range(3)])
    with running_worker(app):
        assert started.wait(20)
        assert handles[1].cancel(terminate=True)
        release.set()
        with pytest.raises(JobCancelled):
            handles[1].get(timeout=20)
        assert [handles[0].get(timeout=20), handles[2].get(timeout=20)] == [0, 20]


def test_link_callbacks_of_a_batch_job_receive_its_result(app: App) -> None:
    seen: list[Any] = []

    @app.task(name="doubler", batch=Batch(max_size=10, max_wait=NOW))
    def doubler(jobs: list[BatchJob]) -> None:
        for job in jobs:
            job.done(job.args[0] * 2)

    @app.task(name="record")
    def record(value: int) -> int:
        seen.append(value)
        return value

    handles = [doubler.apply_async((n,), link=record.s()) for n in (1, 2)]
    with running_worker(app):
        assert [handle.get(timeout=20) for handle in handles] == [2, 4]
        wait_until(lambda: sorted(seen) == [2, 4], timeout=20, message="the callbacks")


def test_a_batch_step_of_a_chain_feeds_its_workflow(app: App) -> None:
    @app.task(name="add_one")
    def add_one(n: int) -> int:
        return n + 1

    @app.task(name="squares", batch=Batch(max_size=10, max_wait=NOW))
    def squares(jobs: list[BatchJob]) -> None:
        for job in jobs:
            (value,) = job.args
            job.done(value * value)

    @app.task(name="failing_step", batch=Batch(max_size=10, max_wait=NOW), max_attempts=1)
    def failing_step(jobs: list[BatchJob]) -> None:
        for job in jobs:
            job.fail("no")

    ok = chain(add_one.s(2), squares.s(), add_one.s()).apply_async()
    bad = chain(add_one.s(2), failing_step.s(), add_one.s()).apply_async()
    with running_worker(app):
        assert ok.get(timeout=30) == 10
        with pytest.raises(Exception, match="no"):
            bad.get(timeout=30)
    assert bad.status == "failed"


def test_a_soft_timeout_of_a_batch_task_is_refused(app: App) -> None:
    with pytest.raises(TaskRegistrationError, match="soft_timeout="):
        app.task(name="soft", batch=Batch(), soft_timeout=1.0)(lambda jobs: None)


def test_the_handlers_log_lines_are_attached_to_each_job_of_its_batch(
    app: App, admin: Connection
) -> None:
    import logging

    @app.task(name="logging_batch", batch=Batch(max_size=10, max_wait=NOW))
    def logging_batch(jobs: list[BatchJob]) -> None:
        logging.getLogger("app.push").warning("sending %d", len(jobs))

    handles = logging_batch.delay_many([{"n": n} for n in range(3)])
    with running_worker(app):
        for handle in handles:
            handle.get(timeout=20)
    rows = select(
        admin, app, "SELECT meta -> 'pgtasks.logs' -> '1' FROM {schema}.all_jobs ORDER BY id"
    )
    assert len(rows) == 3
    for (document,) in rows:
        assert [line[1:] for line in document["lines"]] == [["WARNING", "app.push", "sending 3"]]
