"""Tasks for the OpenTelemetry tests (tests/integration/test_otel.py).

Configured from the environment like ``executor_app`` (``PGTASKS_DSN``,
``PGTASKS_TEST_SCHEMA``). A process that builds ``app`` (a ``pgtasks worker -A
tests.apps.otel_app:app`` subprocess, a spawned process-pool child) sets the global tracer
provider to one that appends its spans to ``PGTASKS_TEST_SPANS`` (a JSON-lines file) and
instruments the app, as a user's app module would. The test process builds its own App,
calls :func:`register_tasks` and instruments it with an in-memory provider.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

from pgtasks import App, JobContext
from tests.apps import lazy_app
from tests.apps._environment import environment_app

logger = logging.getLogger("otel_app")


@dataclasses.dataclass(frozen=True)
class Tasks:
    add: Any
    flaky: Any
    in_child: Any
    wait_async: Any
    chatty: Any


def register_tasks(app: App) -> Tasks:
    @app.task(name="otel_app.add", executor="thread")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(
        name="otel_app.flaky",
        bind=True,
        max_attempts=3,
        retry_backoff=0.01,
        retry_jitter=False,
        executor="thread",
    )
    def flaky(context: JobContext) -> int:
        if context.attempt == 1:
            raise ValueError("first attempt fails")
        return context.attempt

    @app.task(name="otel_app.in_child", executor="process")
    def in_child() -> int:
        logger.warning("inside the child")
        return os.getpid()

    @app.task(name="otel_app.wait_async")
    async def wait_async(value: str) -> str:
        return value

    @app.task(name="otel_app.chatty", executor="thread")
    def chatty() -> str:
        logger.warning("inside the task")
        return "ok"

    return Tasks(add=add, flaky=flaky, in_child=in_child, wait_async=wait_async, chatty=chatty)


def build_app() -> App:
    """The app of a worker process or pool child, from the environment (traced to a file)."""
    from opentelemetry import trace

    from pgtasks.contrib.otel import instrument
    from tests.support.otel import file_provider

    trace.set_tracer_provider(file_provider(os.environ["PGTASKS_TEST_SPANS"]))
    app = environment_app(
        pool_min_size=0,
        pool_max_size=2,
        poll_interval=0.2,
    )
    register_tasks(app)
    instrument(app)
    return app


#: ``app`` is built on first access, so importing this module needs no environment.
__getattr__ = lazy_app(build_app, __name__)
