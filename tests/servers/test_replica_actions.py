"""No operator action is taken on a stale read: with a replica seconds behind (its replay
paused), the dashboard's pages show the jobs as they were, but its buttons (retry, cancel,
delete, the ticked jobs' actions, the bulk retry) and the CLI act on the primary, with
statements that check the row's state there: a job the replica still shows failed, but
that was retried and ran meanwhile, is not run again, nor deleted while pending; a job it
shows pending that finished is not cancelled."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pgtasks import App, JobStatus
from pgtasks.web import asgi
from tests.support.inprocess import running_worker
from tests.support.replicas import caught_up, replay_paused
from tests.support.servers import replica_dsn
from tests.support.waiting import wait_until
from tests.support.web import Client

Connection = psycopg.Connection[Any]


@pytest.fixture
def standby() -> Any:
    with psycopg.connect(replica_dsn(), autocommit=True) as conn:
        yield conn


def status_shown(web: Client, job_id: int) -> str:
    match = re.search(r'class="status status-(\w+)"', web.get(f"/jobs/{job_id}").text)
    assert match is not None
    return match[1]


def test_actions_on_a_lagging_replicas_pages_act_on_the_primarys_rows(
    make_app: Callable[..., App], admin: Connection, standby: Connection
) -> None:
    app = make_app(replica_dsn=replica_dsn())
    runs: list[int] = []

    @app.task(name="lag.flaky", max_attempts=1)
    def flaky(n: int) -> int:
        runs.append(n)
        if len(runs) == 1:
            raise RuntimeError("first run fails")
        return n

    @app.task(name="lag.later")
    def later() -> None:
        return None

    dashboard = asgi(app)
    web = Client(dashboard)
    try:
        with running_worker(app):
            failed = flaky.delay(1)
            wait_until(lambda: failed.status() == JobStatus.FAILED, message="the first run")
        pending = later.apply_async(countdown=3600)
        caught_up(admin, standby)
        with replay_paused(standby):
            # On the primary: the failed job retried and run, the pending one cancelled.
            assert web.post(f"/jobs/{failed.id}/retry").status_code == 303
            assert app.cancel(pending.id).outcome == "cancelled"
            with running_worker(app):
                assert failed.get(timeout=20) == 1
            # The pages read the replica: as it was.
            assert status_shown(web, failed.id) == "failed"
            assert status_shown(web, pending.id) == "pending"

            # Retry of the job shown failed: refused, it does not run again.
            again = web.post(f"/jobs/{failed.id}/retry")
            assert again.status_code == 409 and "done" in again.text, again.text
            # Cancel of the job shown pending: it finished (cancelled) on the primary.
            cancel = web.post(f"/jobs/{pending.id}/cancel")
            assert cancel.status_code == 303 and "done=finished" in cancel.headers["location"]
            ticked = web.post("/jobs/selected", {"action": "retry", "id": str(failed.id)})
            assert ticked.status_code == 303 and "refused=1" in ticked.headers["location"]
            bulk = web.post("/jobs/bulk/retry", {"status": "failed", "task": "lag.flaky"})
            assert bulk.status_code == 303 and "count=0" in bulk.headers["location"], bulk.headers
        assert runs == [1, 1], runs
        rows = {row.id: row for row in app.get_jobs([failed.id, pending.id])}
        assert rows[failed.id].status == JobStatus.DONE and rows[failed.id].attempts == 2
        assert rows[pending.id].status == JobStatus.CANCELLED
    finally:
        dashboard.close()


def test_delete_of_a_job_the_replica_shows_finished_but_that_was_retried_is_refused(
    make_app: Callable[..., App], admin: Connection, standby: Connection
) -> None:
    app = make_app(replica_dsn=replica_dsn())

    @app.task(name="lag.fails", max_attempts=1)
    def fails() -> None:
        raise RuntimeError("no")

    dashboard = asgi(app)
    web = Client(dashboard)
    try:
        with running_worker(app):
            job = fails.delay()
            wait_until(lambda: job.status() == JobStatus.FAILED, message="the job failed")
        caught_up(admin, standby)
        with replay_paused(standby):
            assert web.post(f"/jobs/{job.id}/retry").status_code == 303  # pending, no worker
            assert status_shown(web, job.id) == "failed"
            deleted = web.post(f"/jobs/{job.id}/delete")
            assert deleted.status_code == 409 and "pending" in deleted.text, deleted.text
            ticked = web.post("/jobs/selected", {"action": "delete", "id": str(job.id)})
            assert ticked.status_code == 303 and "refused=1" in ticked.headers["location"]
        assert job.status() == JobStatus.PENDING
    finally:
        dashboard.close()
