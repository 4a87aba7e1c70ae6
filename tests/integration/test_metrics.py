"""Prometheus metrics of an in-process Worker, scraped over HTTP and parsed.

Each test serves a WorkerMetrics on a free port, runs real jobs through a real Worker
and reads ``/metrics`` with urllib, parsing it with prometheus_client's own parser.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from pgtasks import App, ConfigurationError, Discard, JobHandle, Retry, WorkerMetrics, chain
from tests.support.inprocess import Gates, finished, running_worker
from tests.support.waiting import wait_until

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def metrics() -> Iterator[WorkerMetrics]:
    """A WorkerMetrics served on a free port of 127.0.0.1, sampling depths every 50 ms."""
    worker_metrics = WorkerMetrics(queue_depth_interval=0.05)
    worker_metrics.serve(0)
    yield worker_metrics
    worker_metrics.close()


def scrape(metrics: WorkerMetrics) -> str:
    with urllib.request.urlopen(f"http://{metrics.address}/metrics", timeout=5) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return str(response.read().decode())


def samples(metrics: WorkerMetrics) -> Samples:
    """Every sample of a scrape: (sample name, labels) -> value."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(scrape(metrics))
        for sample in family.samples
    }


def value(scraped: Samples, name: str, /, **labels: str) -> float | None:
    return scraped.get((name, frozenset(labels.items())))


def scrape_until(metrics: WorkerMetrics, name: str, expected: float, /, **labels: str) -> Samples:
    """Scrape until the sample has the expected value; returns that scrape."""
    seen: list[Samples] = []

    def matches() -> bool:
        scraped = samples(metrics)
        seen[:] = [scraped]
        return value(scraped, name, **labels) == expected

    try:
        wait_until(matches, timeout=10, message=f"{name}{labels} == {expected}")
    except AssertionError:
        raise AssertionError(f"last {name}{labels}: {value(seen[0], name, **labels)}") from None
    return seen[0]


def test_counts_started_succeeded_retried_and_failed_attempts_by_task_and_queue(
    app: App, metrics: WorkerMetrics
) -> None:
    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(queue="flaky", max_attempts=1)
    def broken() -> None:
        raise RuntimeError("always")

    @app.task
    def refused() -> None:
        raise Discard("not today")

    attempts: list[int] = []

    @app.task(name="flaky_twice", queue="flaky", max_attempts=3)
    def flaky_twice() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise Retry(delay=0)
        return "ok"

    handles: list[JobHandle[Any]] = [add.delay(1, 2), add.delay(3, 4), flaky_twice.delay()]
    handles += [broken.delay(), refused.delay()]
    with running_worker(app, observers=[metrics]):
        rows = [finished(handle) for handle in handles]
        scraped = scrape_until(
            metrics, "pgtasks_jobs_failed_total", 1.0, task=refused.name, queue="default"
        )

    assert [row.status for row in rows] == ["done", "done", "done", "failed", "failed"]
    add_labels = {"task": add.name, "queue": "default"}
    flaky_labels = {"task": "flaky_twice", "queue": "flaky"}
    broken_labels = {"task": broken.name, "queue": "flaky"}
    assert value(scraped, "pgtasks_jobs_started_total", **add_labels) == 2
    assert value(scraped, "pgtasks_jobs_succeeded_total", **add_labels) == 2
    assert value(scraped, "pgtasks_jobs_started_total", **flaky_labels) == 3
    assert value(scraped, "pgtasks_jobs_retried_total", **flaky_labels) == 2
    assert value(scraped, "pgtasks_jobs_succeeded_total", **flaky_labels) == 1
    assert value(scraped, "pgtasks_jobs_failed_total", **broken_labels) == 1
    assert value(scraped, "pgtasks_jobs_succeeded_total", **broken_labels) is None
    assert value(scraped, "pgtasks_jobs_retried_total", **add_labels) is None


def test_histograms_observe_the_duration_and_start_latency_of_every_attempt(
    app: App, metrics: WorkerMetrics
) -> None:
    @app.task(queue="reports")
    def report(n: int) -> int:
        return n

    handles = [report.delay(n) for n in range(4)]
    labels = {"task": report.name, "queue": "reports"}
    with running_worker(app, observers=[metrics]):
        for handle in handles:
            finished(handle)
        scraped = scrape_until(metrics, "pgtasks_job_duration_seconds_count", 4.0, **labels)

    assert value(scraped, "pgtasks_job_start_latency_seconds_count", **labels) == 4
    assert value(scraped, "pgtasks_job_duration_seconds_bucket", le="+Inf", **labels) == 4
    assert value(scraped, "pgtasks_job_start_latency_seconds_bucket", le="+Inf", **labels) == 4
    duration_sum = value(scraped, "pgtasks_job_duration_seconds_sum", **labels)
    latency_sum = value(scraped, "pgtasks_job_start_latency_seconds_sum", **labels)
    assert duration_sum is not None and 0 <= duration_sum < 5
    assert latency_sum is not None and 0 <= latency_sum < 20
    buckets = sorted(
        (float(dict(label_set)["le"]), count)
        for (name, label_set), count in scraped.items()
        if name == "pgtasks_job_start_latency_seconds_bucket"
    )
    counts = [count for _, count in buckets]
    assert counts == sorted(counts), "histogram buckets are cumulative"
    assert buckets[0][0] == 0.001 and buckets[-1][0] == float("inf")


def test_busy_slots_and_queue_depth_follow_the_work_in_progress(
    app: App, metrics: WorkerMetrics
) -> None:
    gates = Gates()
    gate = gates()
    entered = threading.Event()

    @app.task(queue="media")
    def transcode(block: bool) -> None:
        if block:
            entered.set()
            gate.wait(10)

    blocker = transcode.delay(True)
    try:
        with running_worker(app, queues=["media", "empty"], concurrency=1, observers=[metrics]):
            assert entered.wait(10)
            waiting = [transcode.delay(False) for _ in range(3)]
            scraped = scrape_until(
                metrics, "pgtasks_queue_depth", 3.0, store="default", queue="media"
            )
            assert value(scraped, "pgtasks_worker_busy_slots") == 1
            assert value(scraped, "pgtasks_worker_slots") == 1
            assert value(scraped, "pgtasks_queue_running_jobs", store="default", queue="media") == 1
            assert value(scraped, "pgtasks_queue_depth", store="default", queue="empty") == 0
            assert (
                value(scraped, "pgtasks_queue_depth_sampled_timestamp_seconds", store="default")
                or 0
            ) > 0

            gate.set()
            for handle in [blocker, *waiting]:
                finished(handle)
            scraped = scrape_until(
                metrics, "pgtasks_queue_depth", 0.0, store="default", queue="media"
            )
            scraped = scrape_until(metrics, "pgtasks_worker_busy_slots", 0.0)
            # The running count is sampled: the sample after the last finish says 0.
            scraped = scrape_until(
                metrics, "pgtasks_queue_running_jobs", 0.0, store="default", queue="media"
            )
            assert value(scraped, "pgtasks_queue_running_jobs", store="default", queue="media") == 0
    finally:
        gates.open_all()


def test_the_queue_depth_counts_only_jobs_that_are_due(app: App, metrics: WorkerMetrics) -> None:
    @app.task(queue="later")
    def remind() -> None:
        pass

    remind.apply_async(countdown=3600)
    with running_worker(app, queues=["later"], observers=[metrics]):
        scraped = scrape_until(metrics, "pgtasks_queue_depth", 0.0, store="default", queue="later")

    assert value(scraped, "pgtasks_queue_running_jobs", store="default", queue="later") == 0


def test_a_worker_without_queues_samples_every_queue_with_jobs(
    app: App, metrics: WorkerMetrics
) -> None:
    gates = Gates()
    gate = gates()

    @app.task(queue="q1")
    def hold() -> None:
        gate.wait(10)

    try:
        with running_worker(app, concurrency=1, observers=[metrics]):
            hold.delay()
            app.send_task(hold.name, queue="q2")
            scrape_until(metrics, "pgtasks_queue_running_jobs", 1.0, store="default", queue="q1")
            scraped = scrape_until(metrics, "pgtasks_queue_depth", 1.0, store="default", queue="q2")
            assert value(scraped, "pgtasks_queue_depth", store="default", queue="q1") == 0
            gate.set()
    finally:
        gates.open_all()


def test_the_worker_info_names_the_worker_schema_and_queues(
    app: App, metrics: WorkerMetrics
) -> None:
    with running_worker(app, queues=["a", "b"], observers=[metrics]) as worker:
        info = {
            "name": worker.name,
            "schema": app.schema,
            "store": "default",
            "queues": "a,b",
            "version": "0.1.0",
        }
        scrape_until(metrics, "pgtasks_worker_info", 1.0, **info)


def test_each_worker_metrics_has_a_registry_of_its_own_and_leaves_the_global_one_alone(
    metrics: WorkerMetrics,
) -> None:
    other = WorkerMetrics()
    try:
        other.jobs_started.labels("t", "q").inc()

        assert other.registry is not metrics.registry
        assert value(samples(metrics), "pgtasks_jobs_started_total", task="t", queue="q") is None
        assert not [name for name in REGISTRY._names_to_collectors if name.startswith("pgtasks")]
    finally:
        other.close()


def test_process_metrics_are_served_beside_the_worker_metrics(metrics: WorkerMetrics) -> None:
    names = {name for name, _ in samples(metrics)}

    assert "process_cpu_seconds_total" in names
    assert "pgtasks_worker_busy_slots" in names


def test_serving_on_a_port_in_use_is_a_configuration_error(metrics: WorkerMetrics) -> None:
    port = int(str(metrics.address).rsplit(":", 1)[1])
    other = WorkerMetrics()

    with pytest.raises(ConfigurationError, match=rf"cannot serve metrics on 127.0.0.1:{port}: "):
        other.serve(port)


def test_closing_stops_the_http_server() -> None:
    worker_metrics = WorkerMetrics()
    port = worker_metrics.serve(0)
    assert worker_metrics.address == f"127.0.0.1:{port}"

    worker_metrics.close()

    assert worker_metrics.address is None
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_a_non_positive_sampling_interval_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match="queue_depth_interval= must be a positive"):
        WorkerMetrics(queue_depth_interval=0)


def test_workflow_steps_waiting_for_earlier_steps_are_sampled(
    app: App, metrics: WorkerMetrics
) -> None:
    gates = Gates()
    release = gates()

    @app.task(queue="flow")
    def hold(name: str) -> str:
        release.wait(10)
        return name

    @app.task(queue="flow")
    def after(previous: str) -> str:
        return previous

    workflow = chain(hold.s("first"), after.s(), after.s()).delay()
    try:
        with running_worker(app, queues=["flow"], observers=[metrics]):
            scraped = scrape_until(
                metrics, "pgtasks_queue_waiting_jobs", 2.0, store="default", queue="flow"
            )
            assert value(scraped, "pgtasks_queue_depth", store="default", queue="flow") is not None
            release.set()
            assert workflow.get(timeout=10) == "first"
            scrape_until(metrics, "pgtasks_queue_waiting_jobs", 0.0, store="default", queue="flow")
    finally:
        gates.open_all()
