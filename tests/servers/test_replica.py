"""pgtasks with a real streaming replica (a second PostgreSQL 15 cluster made with
pg_basebackup by .ci/run; PGTASKS_TEST_REPLICA_DSN, replicating PGTASKS_TEST_DSN).

With the replica's replay paused, what reads the replica shows the queue as it was (the
dashboard's pages, ``pgtasks stats``, ``pgtasks jobs list``, metrics), while what must
read its own writes reads the primary: ``job.get()``, the page an action redirects to.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from pgtasks import App, JobStatus
from pgtasks._app.doctor import diagnose
from pgtasks._job_filter import JobFilter
from pgtasks._worker.metrics import QueueDepthCollector, QueueDepthSampler
from pgtasks.web import asgi, reads
from pgtasks.web.reads import DashboardDatabase
from tests.support.inprocess import running_worker
from tests.support.replicas import caught_up, replay_paused
from tests.support.servers import replica_dsn
from tests.support.waiting import wait_until
from tests.support.web import Client

Connection = psycopg.Connection[Any]


@pytest.fixture
def replica() -> str:
    return replica_dsn()


@pytest.fixture
def standby(replica: str) -> Iterator[Connection]:
    with psycopg.connect(replica, autocommit=True) as conn:
        yield conn


def job_ids(html: str) -> set[int]:
    return {int(number) for number in re.findall(r'href="/jobs/(\d+)"', html)}


def test_the_dashboard_stats_jobs_list_and_metrics_read_the_replica_and_get_the_primary(
    make_app: Callable[..., App], replica: str, admin: Connection, standby: Connection
) -> None:
    app = make_app(replica_dsn=replica)

    @app.task(queue="emails")
    def send(n: int) -> int:
        return n

    first = send.delay_many([{"n": n} for n in range(3)])
    caught_up(admin, standby)
    web = Client(asgi(app))
    sampler = QueueDepthSampler(app, None, QueueDepthCollector(), interval=60, name="test")
    with replay_paused(standby):
        later = send.delay_many([{"n": n} for n in range(3, 8)])
        new = later[0].id

        # Read on the replica: the queue as it was before the five new jobs.
        listed = job_ids(web.get("/jobs?queue=emails").text)
        assert listed == {handle.id for handle in first}
        assert web.get(f"/jobs/{new}").status_code == 404
        dashboard_reads = DashboardDatabase(app, pool_size=2, statement_timeout=5.0)
        overview = reads.overview(app, dashboard_reads)
        assert [(q.queue, q.pending) for q in overview.queues] == [("emails", 3)]
        stats = app.database.read(lambda conn: app.admin.collect_stats(conn))
        assert [(q.queue, q.pending) for q in stats.queues if q.queue] == [("emails", 3)]
        page = reads.jobs_page(dashboard_reads, JobFilter(), before=None, limit=50)
        assert {row.id for row in page.jobs} == {handle.id for handle in first}
        sampler.sample_once()
        assert sampler.collector._pending == {("default", "emails"): 3}

        # Read on the primary: the app's own writes.
        assert later[0].status() == JobStatus.PENDING
        assert len(app.get_jobs([handle.id for handle in later])) == 5
        after_action = web.get(f"/jobs/{new}?done=retried")
        assert after_action.status_code == 200 and f"Job {new}" in after_action.text
        with running_worker(app):
            assert [handle.get(timeout=20) for handle in later] == [3, 4, 5, 6, 7]

        replica_sessions = standby.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name IN"
            " ('pgtasks replica reads', %s)",
            ("pgtasks metrics test",),
        ).fetchone()
        assert replica_sessions is not None and replica_sessions[0] >= 2
    sampler._connection.drop()
    dashboard_reads.close()

    # Replay resumed: the replica catches up, and so do the pages that read it.
    wait_until(
        lambda: (
            job_ids(web.get("/jobs?queue=emails").text) == {handle.id for handle in first + later}
        ),
        timeout=20,
        message="the dashboard to show the replayed jobs",
    )
    # The jobs' inserts come before their ends in the WAL: the list may show them first.
    wait_until(
        lambda: "done" in web.get(f"/jobs/{new}").text,
        timeout=20,
        message="the job page to show the replayed end",
    )


def test_doctor_reports_the_replicas_lag_and_what_hot_standby_feedback_does(
    make_app: Callable[..., App], replica: str, admin: Connection, standby: Connection
) -> None:
    app = make_app(replica_dsn=replica)

    @app.task
    def noop() -> None:
        return None

    caught_up(admin, standby)
    with app.connection() as conn:
        healthy = {finding.check: finding for finding in diagnose(app, conn)}["replica"]
    assert healthy.level == "ok"
    assert "hot_standby_feedback is off" in healthy.summary
    with replay_paused(standby):
        noop.delay_many([{}] * 2000)
        with app.connection() as conn:
            lagging = {finding.check: finding for finding in diagnose(app, conn)}["replica"]
    assert "MiB of WAL behind" in lagging.summary and "0.0 MiB" not in lagging.summary
