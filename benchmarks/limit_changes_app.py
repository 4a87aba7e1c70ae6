"""The app of benchmarks/limit_changes.py (its workers import it): ``PGTASKS_DSN`` and
``PGTASKS_SCHEMA`` from the environment."""

from __future__ import annotations

import os
import time

from pgtasks import App

app = App(os.environ["PGTASKS_DSN"], schema=os.environ["PGTASKS_SCHEMA"])


@app.task(name="changes.held", concurrency=1)
def held(seconds: float) -> None:
    time.sleep(seconds)


@app.task(name="changes.plain")
def plain() -> None: ...
