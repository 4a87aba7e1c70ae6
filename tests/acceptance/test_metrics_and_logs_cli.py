"""``pgtasks worker --metrics-port`` and ``--log-format json`` in real processes.

The worker runs ``tests.apps.basic:app`` in the test's schema; the test enqueues jobs
on an App of its own with the same task names, scrapes ``/metrics`` over HTTP and reads
the worker's stderr.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from psycopg.conninfo import make_conninfo

from pgtasks import App
from tests.support.environment import ROOT, pgtasks_command, pgtasks_env
from tests.support.processes import ChildProcess, Processes
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

APP_PATH = "tests.apps.basic:app"
PASSWORD = "S3cr3t!"
SERVING = re.compile(r"serving Prometheus metrics on http://(?P<address>[^/\s]+)/metrics")


def environment(app: App, dsn: str | None = None, **extra: str) -> dict[str, str]:
    return pgtasks_env(dsn or app.dsn, app.schema, **extra)


Spawn = Callable[[list[str], dict[str, str]], ChildProcess]


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """Start ``pgtasks`` commands (stderr to a log); any still running is killed afterwards."""
    processes = Processes(tmp_path, APP_PATH)

    def start(command: list[str], env: dict[str, str]) -> ChildProcess:
        return processes.spawn("process", command, env, stdout_to_log=False)

    yield start
    processes.close()


def scrape(address: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_worker_serves_metrics_and_writes_json_log_lines(app: App, spawn: Spawn) -> None:
    @app.task(name="tests.apps.basic.ping")
    def ping(n: int = 0) -> int:
        return n

    @app.task(name="tests.apps.basic.fail", max_attempts=1)
    def fail() -> None: ...

    handles = [ping.delay(n) for n in range(3)] + [fail.delay()]
    worker = spawn(
        pgtasks_command(
            "worker", "-A", APP_PATH, "--metrics-port", "0", "--metrics-interval", "0.1",
            "--log-format", "json", "--poll-interval", "0.2",
        ),
        # The test server ignores the password; the logs must not show it.
        environment(app, make_conninfo(app.dsn, password=PASSWORD)),
    )  # fmt: skip
    address = worker.wait_for(SERVING)["address"]
    assert address.startswith("127.0.0.1:"), "metrics bind to the loopback interface by default"
    ping_labels = frozenset({"task": ping.name, "queue": "default"}.items())
    missing_labels = frozenset({"task": fail.name, "queue": "default"}.items())

    scraped = wait_until(
        lambda: (
            (found := scrape(address)).get(("pgtasks_jobs_succeeded_total", ping_labels)) == 3
            and found.get(("pgtasks_jobs_failed_total", missing_labels)) == 1
            and found.get(
                ("pgtasks_queue_depth", frozenset({"store": "default", "queue": "default"}.items()))
            )
            == 0
            and found
        ),
        timeout=15,
        message="3 succeeded, 1 failed and an empty queue in the scrape",
    )
    worker.process.send_signal(signal.SIGTERM)
    assert worker.process.wait(15) == 0

    assert scraped[("pgtasks_jobs_started_total", ping_labels)] == 3
    assert scraped[("pgtasks_job_duration_seconds_count", ping_labels)] == 3
    assert scraped[("pgtasks_job_start_latency_seconds_count", ping_labels)] == 3
    assert scraped[("pgtasks_worker_slots", frozenset())] == 10
    assert scraped[("pgtasks_worker_busy_slots", frozenset())] == 0
    # Every job's task is one this worker's process runs: none was released as unknown.
    assert scraped[("pgtasks_unknown_task_jobs_total", frozenset())] == 0
    assert scraped[("pgtasks_leases_lost_total", frozenset())] == 0
    assert [handle.status() for handle in handles] == ["done", "done", "done", "failed"]

    assert PASSWORD not in worker.log()
    lines = [json.loads(line) for line in worker.log().splitlines()]
    assert all(set(line) >= {"time", "level", "logger", "message"} for line in lines)
    job_lines = {line["job_id"]: line for line in lines if "outcome" in line}
    assert set(job_lines) == {handle.id for handle in handles}
    done_line = job_lines[handles[0].id]
    assert done_line["task"] == ping.name
    assert done_line["attempt"] == 1
    assert done_line["outcome"] == "done"
    assert isinstance(done_line["worker_id"], int)
    assert job_lines[handles[3].id]["outcome"] == "failed"
    assert job_lines[handles[3].id]["level"] == "WARNING"


def test_metrics_port_without_prometheus_client_exits_1_with_the_install_command(
    app: App, spawn: Spawn, tmp_path: Path
) -> None:
    blocker = tmp_path / "blocked" / "prometheus_client"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('blocked by the test')\n")
    env = environment(app, PYTHONPATH=os.pathsep.join([str(blocker.parent), str(ROOT)]))

    worker = spawn(pgtasks_command("worker", "-A", APP_PATH, "--metrics-port", "0"), env)

    assert worker.process.wait(15) == 1
    assert "pip install 'pgtasks[metrics]'" in worker.log()
    assert " started: " not in worker.log()


def test_metrics_port_in_use_exits_1_before_claiming(app: App, spawn: Spawn) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = spawn(
            pgtasks_command("worker", "-A", APP_PATH, "--metrics-port", str(port)), environment(app)
        )

        assert worker.process.wait(15) == 1

    assert f"error: cannot serve metrics on 127.0.0.1:{port}:" in worker.log()
    assert " started: " not in worker.log()


def test_migrate_writes_json_log_lines(make_app: Callable[..., App], spawn: Spawn) -> None:
    fresh = make_app(migrate=False)

    process = spawn(
        pgtasks_command("migrate", "-A", APP_PATH, "--log-format", "json"), environment(fresh)
    )

    assert process.process.wait(30) == 0
    lines: list[dict[str, Any]] = [json.loads(line) for line in process.log().splitlines()]
    assert lines, "migrate logged nothing"
    assert {line["logger"] for line in lines} >= {"pgtasks.migrate"}
    assert any(line["message"].startswith("applied migration 0001_initial") for line in lines)
