"""Parked jobs made visible: the Prometheus gauge ``pgtasks_queue_parked_jobs`` and the
dashboard overview, both counted through the partial index jobs_parked_idx (migration
parked_jobs_index): the count reads the parked jobs, never every pending row."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from pgtasks import App, JobContext, WorkerMetrics
from pgtasks.web import asgi
from tests.support.inprocess import execute, running_worker
from tests.support.scrape import scrape_until, value
from tests.support.web import LOOPBACK, Client


@pytest.fixture
def metrics() -> Iterator[WorkerMetrics]:
    served = WorkerMetrics(queue_depth_interval=0.05)
    served.serve(0)
    yield served
    served.close()


def parked_is(state: str, jobs: float) -> Callable[[Any], bool]:
    def check(scraped: Any) -> bool:
        labels = {"store": "default", "queue": "default", "state": state}
        return value(scraped, "pgtasks_queue_parked_jobs", **labels) == jobs

    return check


def park_jobs(app: App) -> tuple[Any, Any]:
    @app.task(bind=True, name="durable.nap")
    def nap(ctx: JobContext) -> None:
        ctx.sleep(3600)

    @app.task(bind=True, name="durable.wait")
    def wait(ctx: JobContext, key: str) -> Any:
        return ctx.wait_for_event(key)

    return nap, wait


def test_the_parked_gauge_and_the_overview_count_sleeping_and_waiting_jobs(
    app: App, metrics: WorkerMetrics
) -> None:
    nap, wait = park_jobs(app)
    with running_worker(app, observers=[metrics]):
        nap.delay(), nap.delay(), wait.delay("k")
        scrape_until(metrics, parked_is("sleeping", 2.0), "sleeping == 2.0")
        scrape_until(metrics, parked_is("waiting", 1.0), "waiting == 1.0")
        app.emit_event("k", 1)
        # A count that drops to none reports 0 (not a stale 1).
        scrape_until(metrics, parked_is("waiting", 0.0), "waiting == 0.0")
    web = Client(asgi(app), LOOPBACK)
    html = web.get("/").text
    assert 'data-parked="default:sleeping">2 sleeping<' in html
    assert "default:waiting" not in html


def test_the_parked_count_reads_its_partial_index(app: App, admin: psycopg.Connection[Any]) -> None:
    """20 000 plain pending jobs and 3 parked ones: the count's plan reads jobs_parked_idx
    (the plan of a pending-rows scan would name jobs_claim_idx or a Seq Scan)."""
    execute(
        admin,
        app,
        "INSERT INTO {schema}.jobs (task_name, queue, args, kwargs, status, run_at, max_attempts)"
        " SELECT 'plain', 'default', '[]', '{{}}', 'pending', now(), 3"
        " FROM generate_series(1, 20000)",
    )
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET meta = jsonb_build_object('pgtasks.parked',"
        " jsonb_build_object('kind', 'sleep')) WHERE id IN (SELECT id FROM {schema}.jobs"
        " ORDER BY id LIMIT 3)",
    )
    execute(admin, app, "ANALYZE {schema}.jobs")
    statement = app.queries._statements["count_parked_jobs"]
    plan = "\n".join(
        row[0] for row in admin.execute(b"EXPLAIN (ANALYZE, COSTS OFF) " + statement).fetchall()
    )
    assert "jobs_parked_idx" in plan, plan
    assert "Seq Scan" not in plan and "jobs_claim_idx" not in plan, plan
    assert app.count_parked_jobs() == {"default": {"sleeping": 3}}
