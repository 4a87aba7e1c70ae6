"""examples/fastapi_app.py runs: a real uvicorn server, requests over HTTP, a clean stop."""

from __future__ import annotations

import pytest

from tests.support.examples import run_example

pytestmark = pytest.mark.acceptance


def test_fastapi_example_enqueues_in_its_transaction_and_awaits_the_result(
    example_env: dict[str, str],
) -> None:
    out = run_example("examples.fastapi_app", example_env)
    assert "created: order 1, job 1" in out
    assert "result: done: order 1 (teapot) confirmed" in out
    assert "refused: HTTP 409" in out
    assert "dashboard: HTTP 200" in out
    assert "after the rollback: 0 orders, 0 jobs" in out
    assert "service stopped" in out
