"""examples/fastapi_app.py runs: a real uvicorn server, requests over HTTP, a clean stop."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.support.environment import ROOT, pgtasks_env
from tests.support.schemas import drop_schema, new_schema_name

pytestmark = pytest.mark.acceptance


@pytest.fixture
def example_env(dsn: str) -> Iterator[dict[str, str]]:
    schema = new_schema_name()
    yield pgtasks_env(dsn, schema, schema_variable="PGTASKS_SCHEMA")
    drop_schema(dsn, schema)


def test_fastapi_example_enqueues_in_its_transaction_and_awaits_the_result(
    example_env: dict[str, str],
) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "examples.fastapi_app"],
        cwd=ROOT,
        env=example_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    out = completed.stdout
    assert "created: order 1, job 1" in out
    assert "result: done: order 1 (teapot) confirmed" in out
    assert "refused: HTTP 409" in out
    assert "after the rollback: 0 orders, 0 jobs" in out
    assert "service stopped" in out
