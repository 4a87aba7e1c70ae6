"""OpenTelemetry (pgtasks.contrib.otel): one trace from enqueue to execution, in the test
process and in other processes (a worker subprocess, a process-pool child), links on
retries, trace ids in JSON logs, and nothing at all without the API installed.

The test process traces to an in-memory exporter; other processes import
``tests.apps.otel_app``, which exports their spans to a JSON-lines file.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pgtasks import App, JobStatus, JsonFormatter, Worker, chain
from pgtasks.contrib.otel import TRACE_KEY, instrument, is_instrumented, uninstrument
from tests.apps.otel_app import Tasks, register_tasks
from tests.support.environment import ROOT, pgtasks_env
from tests.support.inprocess import execute, finished, running_worker
from tests.support.otel import finished_spans, memory_provider, read_spans
from tests.support.processes import Processes
from tests.support.waiting import wait_until

APP_PATH = "tests.apps.otel_app:app"


@pytest.fixture
def spans_file(tmp_path: Path, dsn: str, app: App, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where other processes' spans go; their apps are built from this environment."""
    path = tmp_path / "spans.jsonl"
    monkeypatch.setenv("PGTASKS_DSN", dsn)
    monkeypatch.setenv("PGTASKS_TEST_SCHEMA", app.schema)
    monkeypatch.setenv("PGTASKS_TEST_SPANS", str(path))
    return path


@pytest.fixture
def exporter(app: App) -> InMemorySpanExporter:
    provider, memory = memory_provider()
    assert instrument(app, tracer_provider=provider)
    return memory


@pytest.fixture
def tasks(app: App, spans_file: Path, exporter: InMemorySpanExporter) -> Tasks:
    return register_tasks(app)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    running = Processes(tmp_path, APP_PATH)
    yield running
    running.close()


def otel_worker(app: App, **options: Any) -> contextlib.AbstractContextManager[Worker]:
    return running_worker(app, app_path=APP_PATH, processes=1, **options)


def by_name(spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [span for span in spans if span["name"] == name]


def test_one_trace_from_enqueue_to_execution(
    app: App, tasks: Tasks, exporter: InMemorySpanExporter
) -> None:
    handle = tasks.add.delay(2, 3)
    carrier = handle.refresh().meta[TRACE_KEY]
    assert carrier["traceparent"].startswith("00-")
    with otel_worker(app) as worker:
        assert finished(handle).result == 5
        wait_until(lambda: by_name(finished_spans(exporter), "process otel_app.add"))
    spans = finished_spans(exporter)
    [send] = by_name(spans, "send otel_app.add")
    [process] = by_name(spans, "process otel_app.add")
    assert send["kind"] == "PRODUCER"
    assert send["attributes"]["messaging.system"] == "pgtasks"
    assert send["attributes"]["messaging.message.id"] == str(handle.id)
    assert send["attributes"]["messaging.destination.name"] == "default"
    assert carrier["traceparent"].startswith(f"00-{send['trace_id']}-{send['span_id']}-")
    assert process["kind"] == "CONSUMER"
    assert process["trace_id"] == send["trace_id"]
    assert process["parent_id"] == send["span_id"]
    assert process["links"] == []
    assert process["attributes"] == {
        "messaging.system": "pgtasks",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "default",
        "messaging.message.id": str(handle.id),
        "pgtasks.task": "otel_app.add",
        "pgtasks.attempt": 1,
        "pgtasks.worker_id": worker.worker_id,
        "pgtasks.outcome": "done",
    }


def test_delay_many_is_one_client_span_with_a_create_span_per_job(
    app: App, tasks: Tasks, exporter: InMemorySpanExporter
) -> None:
    handles = tasks.add.delay_many([{"a": 1, "b": 1}, {"a": 2, "b": 2}, {"a": 3, "b": 3}])
    spans = finished_spans(exporter)
    [send] = by_name(spans, "send otel_app.add")
    creates = by_name(spans, "create otel_app.add")
    assert send["kind"] == "CLIENT"
    assert send["attributes"]["messaging.batch.message_count"] == 3
    assert [span["kind"] for span in creates] == ["PRODUCER"] * 3
    assert {span["parent_id"] for span in creates} == {send["span_id"]}
    assert [span["attributes"]["messaging.message.id"] for span in creates] == [
        str(handle.id) for handle in handles
    ]
    with otel_worker(app):
        for handle in handles:
            finished(handle)
        wait_until(lambda: len(by_name(finished_spans(exporter), "process otel_app.add")) == 3)
    processes = by_name(finished_spans(exporter), "process otel_app.add")
    parent_of = {
        span["attributes"]["messaging.message.id"]: span["parent_id"] for span in processes
    }
    assert parent_of == {
        span["attributes"]["messaging.message.id"]: span["span_id"] for span in creates
    }


def test_a_retry_is_a_new_trace_linked_to_the_enqueue(
    app: App, tasks: Tasks, exporter: InMemorySpanExporter
) -> None:
    handle = tasks.flaky.delay()
    with otel_worker(app):
        assert finished(handle).result == 2
        wait_until(lambda: len(by_name(finished_spans(exporter), "process otel_app.flaky")) == 2)
    spans = finished_spans(exporter)
    [send] = by_name(spans, "send otel_app.flaky")
    first, second = sorted(
        by_name(spans, "process otel_app.flaky"), key=lambda s: s["attributes"]["pgtasks.attempt"]
    )
    assert first["parent_id"] == send["span_id"]
    assert first["attributes"]["pgtasks.outcome"] == "retried"
    assert first["events"] == ["exception"]
    assert first["status"] == "ERROR"
    assert second["parent_id"] is None
    assert second["trace_id"] != send["trace_id"]
    assert second["links"] == [{"trace_id": send["trace_id"], "span_id": send["span_id"]}]
    assert second["attributes"]["pgtasks.outcome"] == "done"


def test_async_tasks_transactional_and_asyncio_enqueues_are_traced(
    app: App, tasks: Tasks, exporter: InMemorySpanExporter, dsn: str
) -> None:
    import asyncio

    import psycopg

    with psycopg.connect(dsn) as conn:
        handle = tasks.wait_async.apply_async(args=["x"], connection=conn)
    from_asyncio = asyncio.run(tasks.wait_async.aapply_async(args=["y"]))
    assert TRACE_KEY in from_asyncio.refresh().meta
    with otel_worker(app):
        assert finished(handle).result == "x"
        assert finished(from_asyncio).result == "y"
        wait_until(
            lambda: len(by_name(finished_spans(exporter), "process otel_app.wait_async")) == 2
        )
    spans = finished_spans(exporter)
    sends = {
        span["attributes"]["messaging.message.id"]: span
        for span in spans
        if span["name"] == "send otel_app.wait_async"
    }
    processes = by_name(spans, "process otel_app.wait_async")
    assert len(sends) == 2
    for process in processes:
        send = sends[process["attributes"]["messaging.message.id"]]
        assert (process["trace_id"], process["parent_id"]) == (send["trace_id"], send["span_id"])


def test_an_attempt_that_lost_its_lease_ends_its_span_lease_lost(
    app: App, exporter: InMemorySpanExporter, admin: Any, tasks: Tasks
) -> None:
    import threading

    started, release = threading.Event(), threading.Event()

    @app.task(name="otel.hold")
    def hold() -> None:
        started.set()
        release.wait(30)

    with otel_worker(app, rescue_interval=60.0):
        handle = hold.delay()
        assert started.wait(10)
        execute(
            admin, app, "UPDATE {schema}.jobs SET locked_by = 424242 WHERE id = %s", [handle.id]
        )
        release.set()
        wait_until(lambda: by_name(finished_spans(exporter), "process otel.hold"))
    [process] = by_name(finished_spans(exporter), "process otel.hold")
    assert process["attributes"]["pgtasks.outcome"] == "lease_lost"
    assert process["status"] == "ERROR"


def test_a_job_released_by_a_stopping_worker_ends_its_span_released(
    app: App, exporter: InMemorySpanExporter, tasks: Tasks
) -> None:
    import threading

    started, release = threading.Event(), threading.Event()

    @app.task(name="otel.never_ends")
    def never_ends() -> None:
        started.set()
        release.wait(30)

    try:
        with otel_worker(app) as worker:
            handle = never_ends.delay()
            assert started.wait(10)
            worker.stop(timeout=0.2)
    finally:
        release.set()
    assert handle.status() is JobStatus.PENDING
    [process] = by_name(finished_spans(exporter), "process otel.never_ends")
    assert process["attributes"]["pgtasks.outcome"] == "released"


def test_json_log_lines_carry_the_trace_and_span_ids(
    app: App, tasks: Tasks, exporter: InMemorySpanExporter
) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logging.getLogger("otel_app").addHandler(handler)
    try:
        with otel_worker(app):
            finished(tasks.chatty.delay())
            wait_until(lambda: by_name(finished_spans(exporter), "process otel_app.chatty"))
    finally:
        logging.getLogger("otel_app").removeHandler(handler)
    [process] = by_name(finished_spans(exporter), "process otel_app.chatty")
    [line] = [json.loads(text) for text in stream.getvalue().splitlines()]
    assert line["message"] == "inside the task"
    assert (line["trace_id"], line["span_id"]) == (process["trace_id"], process["span_id"])


def test_the_span_of_a_process_pool_job_lives_in_the_child(
    app: App, tasks: Tasks, exporter: InMemorySpanExporter, spans_file: Path
) -> None:
    handle = tasks.in_child.delay()
    with otel_worker(app):
        child_pid = finished(handle).result
        wait_until(lambda: read_spans(spans_file), message="the child's span")
    [send] = by_name(finished_spans(exporter), "send otel_app.in_child")
    [process] = read_spans(spans_file)
    assert process["name"] == "process otel_app.in_child"
    assert process["pid"] == child_pid
    assert (process["trace_id"], process["parent_id"]) == (send["trace_id"], send["span_id"])
    assert process["attributes"]["pgtasks.outcome"] == "done"


def test_a_worker_in_another_process_continues_the_trace(
    app: App,
    tasks: Tasks,
    exporter: InMemorySpanExporter,
    spans_file: Path,
    processes: Processes,
    dsn: str,
) -> None:
    worker = processes.worker(dsn, app.schema, "--concurrency=2", "--processes=1")
    handles = [tasks.add.delay(1, 2), tasks.in_child.delay()]
    for handle in handles:
        assert finished(handle, timeout=20).status is JobStatus.DONE
    wait_until(lambda: len(read_spans(spans_file)) == 2, message="both workers' spans")
    sends = {span["name"]: span for span in finished_spans(exporter)}
    for span in read_spans(spans_file):
        task = span["name"].removeprefix("process ")
        assert span["trace_id"] == sends[f"send {task}"]["trace_id"]
        assert span["parent_id"] == sends[f"send {task}"]["span_id"]
        assert span["pid"] != worker.pid or task == "otel_app.add"


def test_beat_traces_its_enqueues(app: App, exporter: InMemorySpanExporter, dsn: str) -> None:
    from datetime import timedelta

    import psycopg

    from pgtasks import Beat

    @app.task(name="otel.tick")
    def tick() -> None: ...

    app.add_periodic(tick, every=timedelta(seconds=1), name="ticking")
    beat = Beat(app)
    with psycopg.connect(dsn, autocommit=True) as conn:
        beat.run_pass(conn)
        execute(
            conn,
            app,
            "UPDATE {schema}.periodic SET processed_until = processed_until - interval '1.5 s'",
        )
        result = beat.run_pass(conn)
    [item, *_] = result.enqueued
    assert TRACE_KEY in app.get_job(item.job_id).refresh().meta
    assert by_name(finished_spans(exporter), "send otel.tick")


def test_uninstrument_stops_tracing(app: App, exporter: InMemorySpanExporter) -> None:
    @app.task(name="otel.plain")
    def plain() -> None: ...

    assert is_instrumented(app)
    uninstrument(app)
    assert not is_instrumented(app)
    handle = plain.delay()
    assert handle.refresh().meta == {}
    assert finished_spans(exporter) == []


BLOCK_OTEL = """
import importlib.abc, sys

class _NoOpenTelemetry(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)")
        return None

sys.meta_path.insert(0, _NoOpenTelemetry())
"""

WITHOUT_OTEL = """
import sys, threading
from pgtasks import App, Worker
from pgtasks.contrib.otel import instrument

app = App(schema=sys.argv[1], poll_interval=0.1)

@app.task(name="plain.add")
def add(a, b):
    return a + b

print("instrumented:", instrument(app))
job = add.delay(2, 3)
worker = Worker(app, concurrency=1)
thread = threading.Thread(target=worker.run)
thread.start()
try:
    print("result:", job.get(timeout=30))
    print("meta:", job.refresh().meta)
finally:
    worker.stop()
    thread.join()
    app.close()
print("otel imported:", any(name.startswith("opentelemetry") for name in sys.modules))
"""


def test_without_the_api_nothing_happens_and_nothing_fails(
    app: App, dsn: str, tmp_path: Path
) -> None:
    (tmp_path / "sitecustomize.py").write_text(BLOCK_OTEL)
    env = pgtasks_env(dsn, app.schema)
    env["PYTHONPATH"] = f"{tmp_path}:{ROOT}"
    probe = subprocess.run(
        [sys.executable, "-c", "import opentelemetry"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert probe.returncode != 0 and "hidden by the test" in probe.stderr
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(WITHOUT_OTEL), app.schema],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert completed.stdout.splitlines() == [
        "instrumented: False",
        "result: 5",
        "meta: {}",
        "otel imported: False",
    ]


def test_a_workflow_is_traced_like_a_batch_and_each_step_continues_its_create_span(
    app: App, tasks: Tasks, exporter: InMemorySpanExporter
) -> None:
    workflow = chain(tasks.add.s(1, 2), tasks.add.s(10)).apply_async()
    spans = finished_spans(exporter)
    [send] = by_name(spans, "send otel_app.add")
    creates = by_name(spans, "create otel_app.add")
    assert send["kind"] == "CLIENT"
    assert len(creates) == 2
    with otel_worker(app):
        assert workflow.get(timeout=20) == 13
        wait_until(lambda: len(by_name(finished_spans(exporter), "process otel_app.add")) == 2)
    processes = by_name(finished_spans(exporter), "process otel_app.add")
    assert {span["trace_id"] for span in processes} == {send["trace_id"]}
    assert sorted(span["parent_id"] for span in processes) == sorted(
        span["span_id"] for span in creates
    )
