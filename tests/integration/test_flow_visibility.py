"""Debounced jobs and batches are visible: ``pgtasks limits`` (text and --json), ``pgtasks
stats --json``'s counters, the dashboard's limits page and the worker's Prometheus
histogram of batch sizes."""

from __future__ import annotations

import json
from typing import Any

from prometheus_client import generate_latest

from pgtasks import App, WorkerMetrics
from pgtasks.web import asgi
from tests.apps.flow_app import register_tasks
from tests.support.cli import cli_runner
from tests.support.inprocess import running_worker
from tests.support.web import Client

FLOW_APP_PATH = "tests.apps.flow_app:app"


def _ran_a_batch_and_debounced(app: App) -> dict[str, Any]:
    tasks = register_tasks(app)
    for version in range(4):
        tasks["reindex"].delay("products", version=version)
    tasks["reindex"].delay("orders")
    handles = tasks["push"].delay_many([{"user": n} for n in range(30)])
    metrics = WorkerMetrics(queue_depth_interval=60.0)
    with running_worker(app, observers=[metrics]):
        assert [handle.get(timeout=20) for handle in handles] == list(range(30))
    return {"metrics": metrics}


def test_limits_and_stats_show_debounced_jobs_and_batches(app: App) -> None:
    _ran_a_batch_and_debounced(app)
    cli = cli_runner(app, FLOW_APP_PATH)

    document = json.loads(cli("limits", "--json").stdout)
    assert document["debounced"] == [
        {"task": "flow_app.reindex", "jobs": 2, "replaced": 3, "most_replaced": 3}
    ]
    assert document["enqueues_debounced"] == 3
    assert document["batch_tasks"] == [{"task": "flow_app.push", "max_size": 50, "max_wait": 0.1}]
    assert document["batch_jobs"] == 30 and document["batches_run"] >= 1
    assert document["mean_batch_size"] == 30 / document["batches_run"]

    text = cli("limits").stdout
    assert "DEBOUNCED TASK" in text and "flow_app.reindex" in text
    assert "BATCH TASK" in text and "jobs in them: 30" in text

    counters = json.loads(cli("stats", "--json").stdout)["counters"]
    assert counters["enqueues_debounced"] == 3 and counters["batch_jobs"] == 30


def test_the_dashboard_limits_page_and_prometheus_show_them(app: App) -> None:
    metrics = _ran_a_batch_and_debounced(app)["metrics"]
    page = Client(asgi(app)).get("/limits").text
    assert 'data-debounced="flow_app.reindex"' in page
    assert '<td class="num" data-stat="replaced">3</td>' in page
    assert 'data-batch-task="flow_app.push"' in page
    exposition = generate_latest(metrics.registry).decode()
    assert 'pgtasks_batch_size_sum{task="flow_app.push"} 30.0' in exposition
