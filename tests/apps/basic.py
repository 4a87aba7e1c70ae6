"""An app configured from the environment, for CLI and multi-process tests.

PGTASKS_DSN and PGTASKS_TEST_SCHEMA are required; PGTASKS_TEST_CONNECT_TIMEOUT (seconds)
shortens the wait for a server that is down.
"""

from __future__ import annotations

import os

from pgtasks import App

app = App(
    os.environ["PGTASKS_DSN"],
    schema=os.environ["PGTASKS_TEST_SCHEMA"],
    connect_timeout=float(os.environ.get("PGTASKS_TEST_CONNECT_TIMEOUT", "5")),
)


@app.task
def ping(n: int = 0) -> int:
    return n


@app.task(max_attempts=1)
def fail() -> None:
    raise RuntimeError("failing on purpose")
