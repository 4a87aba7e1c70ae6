"""The app of the fair queuing and sequence fault scenarios (``pgtasks worker`` processes).
Configured like ``tests.apps.fault_app``: ``PGTASKS_DSN`` and ``PGTASKS_TEST_SCHEMA``; the
sequence task records its executions (``<schema>.executions``)."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from pgtasks import App, JobContext
from tests.apps import lazy_app
from tests.apps._environment import environment_app
from tests.apps.worker_app import Recorder


@dataclasses.dataclass(frozen=True)
class KeyedTasks:
    tenant_job: Any
    ordered: Any


def register_keyed_tasks(app: App) -> KeyedTasks:
    recorder = Recorder(app)

    @app.task(name="keyed_app.tenant_job", fair_key=lambda tenant, *_, **__: tenant)
    def tenant_job(tenant: str, n: int) -> None:
        """A no-op job of a tenant (the claim's started_at says when it started)."""

    @app.task(bind=True, name="keyed_app.ordered", sequence_key=lambda account, *_, **__: account)
    def ordered(context: JobContext, account: str, n: int, seconds: float) -> None:
        execution_id = recorder.started(context)
        time.sleep(seconds)
        recorder.finished(execution_id)

    return KeyedTasks(tenant_job, ordered)


def build_app() -> App:
    app = environment_app(
        connect_timeout=float(os.environ.get("PGTASKS_TEST_CONNECT_TIMEOUT", "2")),
        pool_max_size=int(os.environ.get("PGTASKS_TEST_POOL_MAX", "4")),
    )
    register_keyed_tasks(app)
    return app


#: ``app`` is built on first access, so importing this module needs no environment.
__getattr__ = lazy_app(build_app, __name__)
