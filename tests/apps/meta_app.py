"""Tasks for the job-metadata tests (tests/integration/test_meta.py).

Configured from the environment like ``executor_app``: ``PGTASKS_DSN`` and
``PGTASKS_TEST_SCHEMA``. The test's App calls :func:`register_tasks`; process-pool children
and worker subprocesses import ``tests.apps.meta_app:app``, so they know the same names.
Tasks that must be held wait for a file to exist (a path passed as an argument).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from pathlib import Path
from typing import Any

from pgtasks import App, JobContext, LeaseLostError, Retry
from tests.apps import lazy_app
from tests.apps._environment import environment_app


def wait_for(path: str, limit: float = 60.0) -> bool:
    deadline = time.monotonic() + limit
    while not Path(path).exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


async def await_path(path: str, limit: float = 60.0) -> bool:
    deadline = time.monotonic() + limit
    while not Path(path).exists():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


@dataclasses.dataclass(frozen=True)
class Tasks:
    echo_meta: Any
    thread_progress: Any
    process_progress: Any
    async_progress: Any
    stale_writer: Any
    flaky: Any
    hold: Any


def register_tasks(app: App) -> Tasks:
    """Register the tasks on ``app`` under fixed names (``meta_app.*``)."""

    @app.task(name="meta_app.echo_meta", bind=True)
    def echo_meta(context: JobContext) -> dict[str, Any]:
        """Return the meta the task sees in its context."""
        return dict(context.meta)

    @app.task(name="meta_app.thread_progress", bind=True, executor="thread")
    def thread_progress(context: JobContext, path: str) -> str:
        context.set_progress(3, 10, message="three of ten")
        context.update_meta({"stage": "thread"}, extra=1)
        wait_for(path)
        return "done"

    @app.task(name="meta_app.process_progress", bind=True, executor="process")
    def process_progress(context: JobContext, path: str) -> int:
        context.set_progress(7, 10, message=f"pid {os.getpid()}")
        context.update_meta(stage="process")
        wait_for(path)
        return os.getpid()

    @app.task(name="meta_app.async_progress", bind=True)
    async def async_progress(context: JobContext, path: str) -> str:
        await context.aset_progress(1, 4, message="async")
        await context.aupdate_meta(stage="async")
        await await_path(path)
        return "done"

    @app.task(name="meta_app.stale_writer", bind=True, max_attempts=1)
    def stale_writer(context: JobContext, path: str) -> str:
        """Wait until told, then try to write: the lease is gone by then."""
        wait_for(path)
        try:
            context.set_progress(1, 1)
        except LeaseLostError as error:
            return f"refused: {error}"
        return "written"

    @app.task(
        name="meta_app.flaky", bind=True, max_attempts=3, retry_backoff=0.01, retry_jitter=False
    )
    def flaky(context: JobContext) -> int:
        if context.attempt == 1:
            raise ValueError("first attempt fails")
        if context.attempt == 2:
            raise Retry(0.01, reason="second attempt asks for a retry")
        return context.attempt

    @app.task(name="meta_app.hold", bind=True, max_attempts=3)
    def hold(context: JobContext, path: str) -> int:
        """Runs until ``path`` exists (a worker subprocess SIGKILLed meanwhile loses it)."""
        wait_for(path)
        return context.attempt

    return Tasks(
        echo_meta=echo_meta,
        thread_progress=thread_progress,
        process_progress=process_progress,
        async_progress=async_progress,
        stale_writer=stale_writer,
        flaky=flaky,
        hold=hold,
    )


def build_app() -> App:
    """The app of a worker process or pool child, from the environment."""
    app = environment_app(
        pool_min_size=0,
        pool_max_size=2,
        lease_timeout=1.0,
        heartbeat_interval=0.2,
        rescue_interval=0.2,
        poll_interval=0.2,
    )
    register_tasks(app)
    return app


#: ``app`` is built on first access, so importing this module needs no environment.
__getattr__ = lazy_app(build_app, __name__)
