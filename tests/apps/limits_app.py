"""The app of the limits fault scenarios (concurrency and rate limits across ``pgtasks
worker`` processes). Configured like ``tests.apps.fault_app``: ``PGTASKS_DSN`` and
``PGTASKS_TEST_SCHEMA``; every task records its executions (``<schema>.executions``)."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from pgtasks import App, JobContext
from tests.apps import lazy_app
from tests.apps._environment import environment_app
from tests.apps.worker_app import Recorder

#: The limits the scenarios check.
TASK_CONCURRENCY = 3
KEY_CONCURRENCY = 1
QUEUE_CONCURRENCY = 2
CAPPED_QUEUE = "capped"
RATE = "240/m"
RATE_PER_SECOND = 4.0
#: The rate a new user tries first (docs/howto/flow-control.md), on a default worker.
FAST_RATE = "5/s"


@dataclasses.dataclass(frozen=True)
class LimitTasks:
    per_task: Any
    per_key: Any
    in_queue: Any
    rated: Any
    fast_rated: Any
    solo: Any
    plain: Any
    #: Declares no limit (an operator limits it at runtime).
    free: Any = None


def register_limit_tasks(app: App) -> LimitTasks:
    recorder = Recorder(app)
    app.queue(CAPPED_QUEUE, concurrency=QUEUE_CONCURRENCY)

    def run(context: JobContext, seconds: float) -> None:
        execution_id = recorder.started(context)
        time.sleep(seconds)
        recorder.finished(execution_id)

    @app.task(bind=True, name="limits_app.per_task", concurrency=TASK_CONCURRENCY)
    def per_task(context: JobContext, seconds: float) -> None:
        run(context, seconds)

    @app.task(
        bind=True,
        name="limits_app.per_key",
        concurrency=KEY_CONCURRENCY,
        concurrency_key=lambda user, **_: user,
    )
    def per_key(context: JobContext, user: str, seconds: float) -> None:
        run(context, seconds)

    @app.task(bind=True, name="limits_app.in_queue", queue=CAPPED_QUEUE)
    def in_queue(context: JobContext, seconds: float) -> None:
        run(context, seconds)

    @app.task(bind=True, name="limits_app.rated", rate_limit=RATE)
    def rated(context: JobContext) -> None:
        recorder.instant(context)

    @app.task(bind=True, name="limits_app.fast_rated", rate_limit=FAST_RATE)
    def fast_rated(context: JobContext) -> None:
        recorder.instant(context)

    @app.task(bind=True, name="limits_app.solo", concurrency=1)
    def solo(context: JobContext, seconds: float) -> None:
        run(context, seconds)

    @app.task(bind=True, name="limits_app.plain")
    def plain(context: JobContext) -> None:
        recorder.instant(context)

    @app.task(bind=True, name="limits_app.free")
    def free(context: JobContext, seconds: float) -> None:
        run(context, seconds)

    return LimitTasks(per_task, per_key, in_queue, rated, fast_rated, solo, plain, free)


def build_app() -> App:
    app = environment_app(
        connect_timeout=float(os.environ.get("PGTASKS_TEST_CONNECT_TIMEOUT", "2")),
        pool_max_size=int(os.environ.get("PGTASKS_TEST_POOL_MAX", "4")),
    )
    register_limit_tasks(app)
    return app


#: ``app`` is built on first access, so importing this module needs no environment.
__getattr__ = lazy_app(build_app, __name__)
