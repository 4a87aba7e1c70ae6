"""A dashboard mounted in FastAPI (examples/fastapi_app.py, as docs/howto/dashboard.md
mounts it) and served by uvicorn stops on SIGTERM with browsers watching: the open event
streams end, the lifespan's shutdown runs (its in-process worker stops gracefully and
deregisters), and the process exits."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import httpx
import psycopg
import pytest
from psycopg import sql

from tests.support.environment import ROOT, pgtasks_env
from tests.support.schemas import drop_schema, new_schema_name
from tests.support.waiting import wait_until
from tests.support.web import free_port

pytestmark = pytest.mark.acceptance


@pytest.fixture
def example_env(dsn: str) -> Iterator[dict[str, str]]:
    schema = new_schema_name()
    # The example keeps its tables in a schema of its own, which this variable moves.
    yield pgtasks_env(dsn, schema, schema_variable="PGTASKS_EXAMPLE_SCHEMA")
    drop_schema(dsn, schema)


@pytest.fixture
def service(example_env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[str], str]]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "examples.fastapi_app:api", "--port", str(port)],
        cwd=ROOT,
        env=example_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def answers() -> bool:
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            try:
                return httpx.get(f"{url}/ops/tasks/", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(answers, timeout=30, message="the service to answer")
        yield process, url
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)


def registered_workers(example_env: dict[str, str]) -> int:
    with psycopg.connect(example_env["PGTASKS_DSN"], autocommit=True) as conn:
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.workers").format(
                sql.Identifier(example_env["PGTASKS_EXAMPLE_SCHEMA"])
            )
        ).fetchone()
    return int(row[0]) if row else 0


def test_sigterm_stops_the_service_with_event_streams_open(
    service: tuple[subprocess.Popen[str], str], example_env: dict[str, str]
) -> None:
    process, url = service
    assert registered_workers(example_env) == 1  # the lifespan's worker runs
    job = httpx.post(f"{url}/orders", params={"item": "teapot"}, timeout=10).json()["job_id"]
    ended: dict[str, list[str]] = {}
    opened = threading.Barrier(4)

    def watch(page: str) -> None:
        with (
            httpx.Client(timeout=httpx.Timeout(30)) as client,
            client.stream("GET", f"{url}/ops/tasks/events{page}") as stream,
        ):
            lines = stream.iter_lines()
            first = next(lines)
            opened.wait(10)
            ended[page] = [first, *lines]  # until the server ends the stream

    pages = ["", "/jobs?status=done", f"/jobs/{job}"]
    watchers = [threading.Thread(target=watch, args=(page,), daemon=True) for page in pages]
    for watcher in watchers:
        watcher.start()
    opened.wait(10)
    process.send_signal(signal.SIGTERM)
    # Stopping takes the worker's graceful stop, never the streams' age (300 s).
    code = process.wait(timeout=20)
    output = process.stdout.read() if process.stdout else ""
    for watcher in watchers:
        watcher.join(5)
    # uvicorn re-raises the SIGTERM it handled once it has shut down (the default action).
    assert code in (0, -signal.SIGTERM), output
    assert sorted(ended) == sorted(pages), output
    for lines in ended.values():
        assert lines[0] == "retry: 1000"
    assert "Waiting for application shutdown." in output
    assert "Application shutdown complete." in output
    assert registered_workers(example_env) == 0  # the worker stopped and deregistered


def test_the_example_service_still_answers_while_a_stream_is_open(
    service: tuple[subprocess.Popen[str], str],
) -> None:
    """The streams are ended by SIGTERM only: a stream open does not block a request."""
    _, url = service
    with (
        httpx.Client(timeout=httpx.Timeout(30)) as client,
        client.stream("GET", f"{url}/ops/tasks/events") as stream,
    ):
        assert next(stream.iter_lines()) == "retry: 1000"
        overview = client.get(f"{url}/ops/tasks/jobs")
        assert overview.status_code == 200
        assert "Jobs" in overview.text
