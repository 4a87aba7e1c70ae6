"""Parked jobs made visible: the Prometheus gauge ``pgtasks_queue_parked_jobs`` and the
dashboard overview, both counted through the partial index jobs_parked_idx (migration
parked_jobs_index): the count reads the parked jobs, never every pending row."""

from __future__ import annotations

from typing import Any

import psycopg

from pgtasks import App, JobContext, WorkerMetrics
from pgtasks.web import asgi
from tests.integration.test_metrics import metrics as metrics
from tests.integration.test_metrics import scrape_until
from tests.support.inprocess import execute, running_worker
from tests.support.web import LOOPBACK, Client


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
        scrape_until(
            metrics,
            "pgtasks_queue_parked_jobs",
            2.0,
            queue="default",
            store="default",
            state="sleeping",
        )
        scrape_until(
            metrics,
            "pgtasks_queue_parked_jobs",
            1.0,
            queue="default",
            store="default",
            state="waiting",
        )
        app.emit_event("k", 1)
        # A count that drops to none reports 0 (not a stale 1).
        scrape_until(
            metrics,
            "pgtasks_queue_parked_jobs",
            0.0,
            queue="default",
            store="default",
            state="waiting",
        )
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
