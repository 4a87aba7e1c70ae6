"""Start deadlines hold on every claim path (migration 0020): a limited job whose deadline
passes while it waits behind a concurrency cap never starts; relative deadlines are
computed on the database's clock at the insert; expired jobs are counted; the expiry
pass reads the pending jobs with a deadline through their own index."""

from __future__ import annotations

import threading
import time
import types
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pgtasks import App, JobCancelled, WorkerMetrics
from pgtasks._app import links
from pgtasks._leases import ClaimRequest
from pgtasks._worker.connection import WORKER_CONNECTION_OPTIONS
from tests.support.inprocess import execute, running_worker, select
from tests.support.scrape import registry_samples, value
from tests.support.waiting import wait_until


def _deadline_passed(admin: psycopg.Connection[Any], app: App, job_id: int) -> bool:
    rows = select(
        admin,
        app,
        "SELECT (meta -> 'pgtasks.expires')::float8 < extract(epoch FROM now())::float8"
        " FROM {schema}.jobs WHERE id = %s",
        (job_id,),
    )
    return bool(rows and rows[0][0])


def test_a_limited_job_whose_deadline_passes_behind_a_concurrency_cap_never_starts(
    app: App, admin: psycopg.Connection[Any], dsn: str
) -> None:
    ran: list[str] = []
    release = threading.Event()

    @app.task(name="capped", concurrency=1)
    def capped(label: str) -> str:
        ran.append(label)
        if label == "blocker":
            release.wait(30)
        return label

    blocker = capped.delay("blocker")
    # The expiry pass of this worker runs once, at its start: what keeps the late job
    # from starting once the slot frees is the limited claim itself.
    with running_worker(app, concurrency=4, rescue_interval=600.0):
        wait_until(lambda: ran == ["blocker"], message="the blocker to hold the only slot")
        late = capped.apply_async(("late",), expires=timedelta(seconds=0.5))
        after = capped.delay("after")
        wait_until(lambda: _deadline_passed(admin, app, late.id), message="the deadline")
        release.set()
        assert blocker.get(timeout=10) == "blocker"
        assert after.get(timeout=10) == "after"
        assert late.status() == "pending"
        # Asked directly too: the limited claim leaves the expired job out.
        with psycopg.connect(dsn, autocommit=True, options=WORKER_CONNECTION_OPTIONS) as conn:
            request = ClaimRequest(10**9, 10, limited=True)
            claimed = app.queries.claim_jobs(conn, request)
        assert [job.id for job in claimed] == []
    assert ran == ["blocker", "after"]

    with running_worker(app), pytest.raises(JobCancelled):
        late.get(timeout=10)
    row = late.fetch()
    assert row.status == "cancelled"
    assert row.attempts == 0
    assert row.last_error is not None and row.last_error.startswith("JobExpired: expired")
    assert ran == ["blocker", "after"]
    with app.connection() as conn:
        assert app.admin.collect_stats(conn).as_json()["counters"]["expired"] == 1


def test_a_relative_deadline_is_counted_on_the_database_clock(
    app: App, admin: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    @app.task(name="clocked")
    def clocked() -> None:
        return None

    # The enqueuing process's clock runs an hour ahead: the deadline does not move.
    skewed = types.SimpleNamespace(time=lambda: time.time() + 3600.0)
    monkeypatch.setattr(links, "time", skewed)
    by_seconds = clocked.apply_async(expires=60)
    by_timedelta = clocked.apply_async(expires=timedelta(minutes=2))

    for handle, seconds in ((by_seconds, 60.0), (by_timedelta, 120.0)):
        meta = handle.fetch().meta
        assert "pgtasks.expires_in" not in meta
        ((lead,),) = select(
            admin,
            app,
            "SELECT (meta -> 'pgtasks.expires')::float8 - extract(epoch FROM created_at)::float8"
            " FROM {schema}.jobs WHERE id = %s",
            (handle.id,),
        )
        assert seconds <= lead < seconds + 5.0


def test_a_hand_written_relative_deadline_that_is_no_number_is_dropped(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    execute(
        admin,
        app,
        "INSERT INTO {schema}.jobs (task_name, queue, args, kwargs, max_attempts, meta)"
        " SELECT 'nobody', 'default', '[]'::jsonb, %s::jsonb, 1, meta"
        " FROM unnest(%s::jsonb[]) WITH ORDINALITY AS given(meta, n) ORDER BY n",
        (
            "{}",
            [
                '{"pgtasks.expires_in": "soon"}',
                '{"pgtasks.expires_in": 1e300}',
                '{"pgtasks.expires_in": [1], "pgtasks.expires": 5}',
            ],
        ),
    )
    rows = select(
        admin, app, "SELECT meta FROM {schema}.jobs WHERE task_name = 'nobody' ORDER BY id"
    )
    assert [meta for (meta,) in rows] == [{}, {}, {"pgtasks.expires": 5}]


def test_the_expiry_pass_reads_the_deadline_index_not_every_due_job(
    app: App, dsn: str, admin: psycopg.Connection[Any]
) -> None:
    @app.task(name="plain")
    def plain() -> None:
        return None

    plain.delay_many([{}] * 3000)
    expired = [plain.apply_async(expires=-1) for _ in range(3)]
    admin.execute(f'ANALYZE "{app.schema}".jobs')

    with (
        psycopg.connect(dsn, autocommit=True, options=WORKER_CONNECTION_OPTIONS) as conn,
        conn.transaction(force_rollback=True),
    ):
        statement = b"EXPLAIN (COSTS OFF) " + app.queries._statements["expire_jobs"]
        plan = "\n".join(row[0] for row in conn.execute(statement, {"limit": 1000}))
    assert "jobs_expiry_idx" in plan, plan
    assert "jobs_claim_idx" not in plan, plan
    # Rolled back: the pass itself ends the three.
    with psycopg.connect(dsn, autocommit=True, options=WORKER_CONNECTION_OPTIONS) as conn:
        assert sorted(app.queries.expire_jobs(conn)) == sorted(job.id for job in expired)


def test_expired_jobs_are_counted_in_prometheus(app: App) -> None:
    @app.task(name="brief")
    def brief() -> None:
        return None

    late = [brief.apply_async(expires=-1) for _ in range(2)]
    metrics = WorkerMetrics(queue_depth_interval=0.05, process_metrics=False)
    with running_worker(app, observers=[metrics]):
        for handle in late:
            with pytest.raises(JobCancelled):
                handle.get(timeout=10)

        def counted() -> bool:
            scraped = registry_samples(metrics)
            return (
                value(scraped, "pgtasks_jobs_expired_total") == 2
                and value(scraped, "pgtasks_schema_events_total", store="default", event="expired")
                == 2
            )

        wait_until(counted, message="the worker's count and the sampled schema total")


def test_retrying_an_expired_job_runs_it(app: App) -> None:
    ran: list[str] = []

    @app.task(name="retried")
    def retried() -> str:
        ran.append("retried")
        return "ran"

    late = retried.apply_async(expires=-1)
    with running_worker(app):
        with pytest.raises(JobCancelled):
            late.get(timeout=10)
        app.admin.retry_job(late.id)
        assert late.get(timeout=10) == "ran"
    assert ran == ["retried"]
    assert "pgtasks.expires" not in late.fetch().meta
