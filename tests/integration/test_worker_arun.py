"""``await Worker.arun()``: a worker inside an asyncio program, stopped by cancelling its task."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg
import pytest

from pgtasks import App, SchemaNotMigratedError, Worker
from tests.support.inprocess import FAST, select
from tests.support.waiting import wait_until


def pgtasks_threads() -> list[str]:
    return [thread.name for thread in threading.enumerate() if thread.name.startswith("pgtasks")]


def test_arun_runs_jobs_and_a_cancelled_task_stops_the_worker_gracefully(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    ran: list[int] = []
    started, release = threading.Event(), threading.Event()

    @app.task
    def record(value: int) -> int:
        ran.append(value)
        return value

    @app.task
    def held() -> str:
        started.set()
        release.wait(10)
        return "finished"

    before = pgtasks_threads()
    worker = Worker(app, **FAST)

    async def program() -> None:
        running = asyncio.ensure_future(worker.arun())
        # The event loop keeps serving while the worker runs.
        handles = [await record.adelay(value) for value in range(20)]
        await asyncio.to_thread(
            wait_until, lambda: sorted(ran) == list(range(20)), message="20 jobs to run"
        )
        assert [handle.get(timeout=5) for handle in handles] == list(range(20))
        assert worker.worker_id is not None
        long_job = held.delay()
        await asyncio.to_thread(started.wait, 10)
        running.cancel()
        # The cancellation stops the worker gracefully: the running job may finish.
        await asyncio.to_thread(
            wait_until, lambda: worker.registration.stopping.is_set(), message="stop()"
        )
        assert not running.done()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await running
        assert long_job.get(timeout=5) == "finished"

    asyncio.run(program())
    assert worker.registration.ended.is_set()
    assert select(admin, app, "SELECT id FROM {schema}.workers") == []
    # The App's own threads (its pool's, the result listener that get() started) stay.
    left = set(pgtasks_threads()) - set(before) - {"pgtasks-results"}
    assert not left, f"arun() left threads behind: {left}"


def test_a_second_cancellation_releases_the_running_jobs_at_once(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    started, release = threading.Event(), threading.Event()

    @app.task
    def held() -> None:
        started.set()
        release.wait(10)

    worker = Worker(app, **{**FAST, "shutdown_timeout": 30.0})

    async def program() -> None:
        running = asyncio.ensure_future(worker.arun())
        job = held.delay()
        await asyncio.to_thread(started.wait, 10)
        running.cancel()
        await asyncio.to_thread(
            wait_until, lambda: worker.registration.stopping.is_set(), message="stop()"
        )
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        rows = select(
            admin, app, "SELECT status, attempts FROM {schema}.all_jobs WHERE id = %s", [job.id]
        )
        assert rows == [("pending", 0)], "the running job was not released"

    try:
        asyncio.run(program())
    finally:
        release.set()
    assert select(admin, app, "SELECT id FROM {schema}.workers") == []


def test_arun_raises_what_run_raises(make_app: Any, dsn: str) -> None:
    unmigrated = make_app(migrate=False)

    async def program() -> None:
        await Worker(unmigrated, **FAST).arun()

    with pytest.raises(SchemaNotMigratedError):
        asyncio.run(program())
