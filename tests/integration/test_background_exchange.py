"""The worker's round trips off the loop thread (pgtasks/_worker/background.py, exchange.py):
a lane's thread and connection, claims in shares, and a worker whose connections are
killed while its lanes are busy."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from pgtasks import App
from pgtasks._worker.background import BackgroundExchanger
from pgtasks._worker.exchange import Exchange
from tests.support.inprocess import running_worker
from tests.support.waiting import wait_until


def exchange() -> Exchange:
    return Exchange(batch=[], finishes=[], claim=None)


def test_runs_one_exchange_at_a_time_and_hands_back_its_result(dsn: str) -> None:
    woken = threading.Event()
    pids: list[int] = []

    def run(conn: psycopg.Connection[Any], item: Exchange) -> None:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        pids.append(int(row[0]))
        item.seconds = len(pids)

    lane = BackgroundExchanger(
        lambda: psycopg.connect(dsn, autocommit=True), run, woken.set, name="test-lane"
    )
    try:
        assert not lane.busy and lane.take() is None
        lane.submit(exchange())
        assert lane.busy
        assert lane.wait(10) and woken.wait(10)
        done = lane.take()
        assert done is not None and done.error is None and done.seconds == 1
        assert not lane.busy
        lane.submit(exchange())
        assert lane.wait(10)
        done = lane.take()
        assert done is not None and done.seconds == 2
        assert pids[0] == pids[1]  # one connection, kept
    finally:
        lane.close()


def test_a_broken_connection_is_reported_dropped_and_replaced(dsn: str) -> None:
    pids: list[int] = []

    def run(conn: psycopg.Connection[Any], item: Exchange) -> None:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        pids.append(int(row[0]))
        if len(pids) == 1:
            conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    lane = BackgroundExchanger(
        lambda: psycopg.connect(dsn, autocommit=True), run, lambda: None, name="test-lane"
    )
    try:
        lane.submit(exchange())
        assert lane.wait(10)
        failed = lane.take()
        assert failed is not None and failed.broken
        assert isinstance(failed.error, psycopg.OperationalError)

        lane.submit(exchange())
        assert lane.wait(10)
        done = lane.take()
        assert done is not None and done.error is None
        assert pids[1] != pids[0]  # a new connection
    finally:
        lane.close()


def test_a_statement_the_server_refuses_keeps_the_connection(dsn: str) -> None:
    def run(conn: psycopg.Connection[Any], item: Exchange) -> None:
        conn.execute("SELECT 1 / 0")

    lane = BackgroundExchanger(
        lambda: psycopg.connect(dsn, autocommit=True), run, lambda: None, name="test-lane"
    )
    try:
        lane.submit(exchange())
        assert lane.wait(10)
        failed = lane.take()
        assert failed is not None and not failed.broken
        assert isinstance(failed.error, psycopg.errors.DivisionByZero)
    finally:
        lane.close()


def test_a_busy_worker_claims_in_shares_that_run_while_the_other_round_trip_is_out(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    """Short jobs at concurrency 50 hold 150 jobs with the automatic prefetch: each round
    trip claims at most a lane's share (75), so the jobs of one share run while the
    other's round trip is on the server. Every job runs once."""
    work, runs = recording_task(app)
    jobs = 3000
    work.delay_many([{}] * jobs)
    with running_worker(app, concurrency=50) as worker:
        wait_until(lambda: done_count(admin, app) == jobs, timeout=60, message="all jobs done")
        lanes = sorted(
            thread.name
            for thread in threading.enumerate()
            if thread.name.startswith(f"pgtasks-exchange-{worker.name}-")
        )
    assert lanes == [f"pgtasks-exchange-{worker.name}-1", f"pgtasks-exchange-{worker.name}-2"]
    # A claim's jobs share its transaction's timestamp (locked_at = now()).
    sizes = [
        int(row[0])
        for row in admin.execute(
            f'SELECT count(*) FROM "{app.schema}".all_jobs GROUP BY locked_at ORDER BY 1 DESC'
        ).fetchall()
    ]
    # More than the slots alone (25 a share): the prefetch was on; never the whole 150.
    assert 25 < sizes[0] <= 75, sizes[:5]
    assert sum(sizes) == jobs
    assert len(runs) == jobs and len(set(runs)) == jobs


@pytest.mark.parametrize(
    ("concurrency", "prefetch"),
    [(8, 24), (25, 75)],
    ids=["whole-claims", "claims-in-shares"],
)
def test_every_job_runs_once_while_the_workers_connections_are_killed(
    app: App, admin: psycopg.Connection[Any], concurrency: int, prefetch: int
) -> None:
    """Round trips in flight on both lanes, their backends terminated again and again:
    claims whose reply was lost are recovered, no outcome is lost, no job runs twice.
    (32 jobs held are claimed whole, 100 in shares of 50: claims.round_trip_share.)"""
    work, runs = recording_task(app, pause=0.002)
    jobs = 5000
    work.delay_many([{}] * jobs)
    kills = 0
    with running_worker(app, concurrency=concurrency, prefetch=prefetch) as worker:
        name = f"pgtasks worker {worker.name}"
        deadline = time.monotonic() + 25
        while (
            time.monotonic() < deadline
            and done_count(admin, app) < jobs
            and not worker._stopped.is_set()  # a worker that died ends the test at once
        ):
            row = admin.execute(
                "SELECT count(*) FROM ("
                " SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s AND state = 'active'"
                # Not the listener (its LISTEN, its read of the paused queues, its count of
                # stored limits).
                " AND query NOT ILIKE 'LISTEN%%' AND query NOT ILIKE '%%queue_pauses%%'"
                " AND query NOT ILIKE '%%AS stored FROM %%.limits;')"
                " AS killed",
                (name,),
            ).fetchone()
            kills += int(row[0]) if row else 0
            time.sleep(0.05)
        wait_until(
            lambda: done_count(admin, app) == jobs or worker._stopped.is_set(),
            timeout=25,
            message="all jobs done",
        )
        assert not worker._stopped.is_set(), "the worker stopped while its backends were killed"
        assert worker.counts.get("claimed", 0) >= jobs

    print(f"terminated {kills} busy worker backends")
    assert kills > 0
    assert len(runs) == jobs, (len(runs), len(set(runs)))
    assert len(set(runs)) == jobs
    row = admin.execute(
        f"SELECT count(*) FROM \"{app.schema}\".all_jobs WHERE status <> 'done' OR attempts <> 1"
    ).fetchone()
    assert row is not None and row[0] == 0


def recording_task(app: App, *, pause: float = 0.0) -> tuple[Any, list[int]]:
    """A task that records the id of each job it runs (then sleeps ``pause`` seconds),
    and the list it records them in."""
    runs: list[int] = []
    lock = threading.Lock()

    @app.task(bind=True)
    def work(ctx: Any) -> None:
        with lock:
            runs.append(ctx.job_id)
        if pause:
            time.sleep(pause)

    return work, runs


def done_count(admin: psycopg.Connection[Any], app: App) -> int:
    row = admin.execute(
        f"SELECT count(*) FROM \"{app.schema}\".all_jobs WHERE status = 'done'"
    ).fetchone()
    assert row is not None
    return int(row[0])
