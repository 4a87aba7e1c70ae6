"""The app the flow-control visibility tests load (``pgtasks limits``, ``stats``): a
debounced task and a batch task, under fixed names.

Configured from the environment: ``PGTASKS_DSN`` and ``PGTASKS_TEST_SCHEMA``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pgtasks import App, Batch, BatchJob
from tests.apps import lazy_app
from tests.apps._environment import environment_app


def register_tasks(app: App) -> dict[str, Any]:
    @app.task(
        name="flow_app.reindex",
        debounce=timedelta(minutes=5),
        debounce_key=lambda index, **_: str(index),
    )
    def reindex(index: str, version: int = 0) -> None: ...

    @app.task(name="flow_app.push", batch=Batch(max_size=50, max_wait=timedelta(seconds=0.1)))
    def push(jobs: list[BatchJob]) -> None:
        for job in jobs:
            job.done(job.kwargs.get("user"))

    return {"reindex": reindex, "push": push}


def build_app() -> App:
    app = environment_app()
    register_tasks(app)
    return app


#: ``app`` is built on first access, so importing this module needs no environment.
__getattr__ = lazy_app(build_app, __name__)
