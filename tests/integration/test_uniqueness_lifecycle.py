"""Uniqueness scopes over a job's life: concurrent enqueues, finishing and retried jobs,
the period's rollover, operator retries and beat (enqueue paths: test_uniqueness.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from pgtasks import App, JobContext, JobHandle, Retry, UniqueKeyTakenError
from pgtasks._job_filter import JobFilter
from pgtasks._worker.beat import Beat
from tests.support.cli import cli_runner
from tests.support.inprocess import Gates, finished, running_worker, select
from tests.support.waiting import wait_until

Connection = psycopg.Connection[Any]
THREADS = 20


@pytest.fixture
def connections(dsn: str) -> Iterator[list[Connection]]:
    opened = [psycopg.connect(dsn, autocommit=True) for _ in range(THREADS)]
    yield opened
    for conn in opened:
        conn.close()


def count(admin: Connection, app: App) -> int:
    return int(select(admin, app, "SELECT count(*) FROM {schema}.all_jobs")[0][0])


@pytest.mark.parametrize(
    "scope", [{"unique_while": "active"}, {"unique_for": timedelta(hours=1)}], ids=str
)
def test_concurrent_enqueues_of_one_key_make_exactly_one_job(
    app: App, admin: Connection, connections: list[Connection], scope: dict[str, Any]
) -> None:
    @app.task
    def rebuild(index: int) -> None: ...

    barrier = threading.Barrier(THREADS)

    def enqueue(index: int) -> JobHandle[None]:
        barrier.wait(timeout=10)
        return rebuild.apply_async(
            [index], idempotency_key="rebuild", connection=connections[index], **scope
        )

    with ThreadPoolExecutor(THREADS) as pool:
        handles = list(pool.map(enqueue, range(THREADS)))

    assert len({handle.id for handle in handles}) == 1
    assert sorted(handle.existed for handle in handles) == [False] + [True] * (THREADS - 1)
    assert count(admin, app) == 1


def test_concurrent_bulk_enqueues_of_shared_keys_make_one_job_per_key(
    app: App, admin: Connection, connections: list[Connection]
) -> None:
    @app.task(unique_while="active", unique_key=lambda n: f"n:{n % 7}")
    def bucket(n: int) -> None: ...

    barrier = threading.Barrier(THREADS)

    def enqueue(index: int) -> list[int]:
        barrier.wait(timeout=10)
        items = [{"n": index + offset} for offset in range(14)]
        return [job.id for job in bucket.delay_many(items, connection=connections[index])]

    with ThreadPoolExecutor(THREADS) as pool:
        ids = {job_id for batch in pool.map(enqueue, range(THREADS)) for job_id in batch}

    assert len(ids) == 7 == count(admin, app)


def test_a_finished_job_frees_its_key_and_a_retried_attempt_keeps_it(
    app: App, admin: Connection
) -> None:
    gates = Gates()
    gate = gates()

    @app.task(bind=True, unique_while="active", unique_key=lambda name: f"import:{name}")
    def import_file(ctx: JobContext, name: str) -> int:
        if ctx.attempt == 1:
            raise Retry(delay=0.2)
        gate.wait(10)
        return ctx.attempt

    first = import_file.delay("a.csv")
    try:
        with running_worker(app):
            # Attempt 1 retried (pending again), then attempt 2 running: the key is held.
            wait_until(lambda: first.fetch().attempts == 2, message="the second attempt")
            during = import_file.delay("a.csv")
            gate.set()
            assert finished(first).status.value == "done"
            after = import_file.delay("a.csv")
            assert finished(after).result == 2
    finally:
        gates.open_all()

    assert during.id == first.id and during.existed
    assert after.id != first.id and not after.existed


def test_the_period_rolls_over_at_the_window_boundary_of_the_database_clock(
    app: App, admin: Connection
) -> None:
    @app.task(unique_for=timedelta(seconds=2), unique_key=lambda: "heartbeat")
    def heartbeat() -> None: ...

    # Windows are aligned to the epoch: start in the first quarter of one, so that the
    # first two enqueues cannot straddle a boundary on a slow machine.
    wait_until(
        lambda: (
            admin.execute(
                "SELECT extract(epoch FROM clock_timestamp())::numeric % 2 < 0.5"
            ).fetchone()
            == (True,)
        ),
        timeout=5,
        message="the start of a 2 s window",
    )
    first = heartbeat.delay()
    (window_end,) = select(
        admin, app, "SELECT upper(unique_window) FROM {schema}.all_jobs WHERE id = %s", [first.id]
    )[0]
    same = heartbeat.delay()
    wait_until(
        lambda: admin.execute("SELECT now() >= %s", [window_end]).fetchone() == (True,),
        timeout=5,
        message="the window to end",
    )
    second = heartbeat.delay()

    assert same.id == first.id and same.existed
    assert second.id != first.id and not second.existed
    windows: list[tuple[datetime, datetime]] = select(
        admin,
        app,
        "SELECT lower(unique_window), upper(unique_window) FROM {schema}.all_jobs ORDER BY id",
    )
    assert windows[1][0] >= windows[0][1] and windows[1][1] - windows[1][0] == timedelta(seconds=2)


def test_retrying_a_job_whose_key_an_active_job_holds_is_refused_clearly(
    app: App, admin: Connection
) -> None:
    @app.task(name="charge", max_attempts=1, unique_while="active", unique_key=lambda n: f"c:{n}")
    def charge(n: int) -> None:
        raise ValueError("card declined")

    failed = charge.delay(1)
    with running_worker(app):
        assert finished(failed).status.value == "failed"
    holder = charge.apply_async([1], countdown=3600)  # pending, out of the workers' reach
    assert holder.id != failed.id

    with pytest.raises(UniqueKeyTakenError) as refused:
        app.admin.retry_job(failed.id)
    assert f"its unique key 'c:1' (unique while active) is held by pending job {holder.id}" in (
        str(refused.value)
    )
    cli = cli_runner(app)("jobs", "retry", str(failed.id))
    assert cli.returncode == 1
    assert f"held by pending job {holder.id}" in cli.stderr
    # Bulk retries leave it failed (and retry the others).
    other = charge.delay(2)
    with running_worker(app):
        assert finished(other).status.value == "failed"
    assert app.admin.retry_failed_jobs() == [other.id]
    assert app.admin.retry_matching(JobFilter(task_name="charge")) == []
    assert failed.status().value == "failed"

    holder.cancel()
    assert app.admin.retry_job(failed.id).retried
    assert charge.delay(1).id == failed.id


def test_a_bulk_retry_of_two_failed_jobs_of_one_key_is_refused_clearly(
    app: App, admin: Connection
) -> None:
    @app.task(name="twice", unique_while="active", unique_key=lambda: "same")
    def twice() -> None: ...

    first = twice.delay()
    first.cancel()
    second = twice.delay()
    second.cancel()

    with pytest.raises(UniqueKeyTakenError, match="several of the jobs share a unique key"):
        app.admin.retry_matching(JobFilter(task_name="twice"))
    assert {first.status().value, second.status().value} == {"cancelled"}


@pytest.fixture
def connect(dsn: str) -> Iterator[Callable[[], Connection]]:
    opened: list[Connection] = []

    def factory() -> Connection:
        conn = psycopg.connect(dsn, autocommit=True)
        opened.append(conn)
        return conn

    yield factory
    for conn in opened:
        conn.close()


def test_beat_skips_ticks_while_a_scoped_periodic_job_is_active(
    app: App, admin: Connection, connect: Callable[[], Connection]
) -> None:
    @app.task(name="rollup", unique_while="active")
    def rollup() -> None: ...

    app.add_periodic(rollup, every=timedelta(seconds=1), name="rollup", catch_up="all")
    beat, conn = Beat(app), connect()
    beat.run_pass(conn)

    def rewind(seconds: float) -> None:
        select(
            admin,
            app,
            "UPDATE {schema}.periodic SET processed_until = processed_until"
            " - make_interval(secs => %s) WHERE name = 'rollup' RETURNING name",
            [seconds],
        )

    rewind(3.5)
    ticks = beat.run_pass(conn).enqueued
    # A second beat that saw the same ticks: each tick's key is still unique for life.
    rewind(3.5)
    repeated = Beat(app).run_pass(connect()).enqueued

    assert len(ticks) >= 3
    assert {item.job_id for item in ticks} == {ticks[0].job_id}
    assert [item.existed for item in ticks] == [False] + [True] * (len(ticks) - 1)
    assert all(item.existed and item.job_id == ticks[0].job_id for item in repeated)
    rows = select(admin, app, "SELECT idempotency_key, unique_key, status FROM {schema}.all_jobs")
    assert len(rows) == 1 and rows[0][1] == "rollup" and rows[0][0].startswith("pgtasks.periodic")

    app.cancel(ticks[0].job_id)
    # The first tick's job is finished: its tick is not enqueued again, later ticks are.
    rewind(3.5)
    after = Beat(app).run_pass(connect()).enqueued
    first_tick = [item for item in after if item.tick == ticks[0].tick]
    assert all(item.existed and item.job_id == ticks[0].job_id for item in first_tick)
    fresh = {item.job_id for item in after if not item.existed}
    assert len(fresh) == 1 and count(admin, app) == 2


def test_jobs_show_and_the_handle_tell_a_jobs_scope(app: App) -> None:
    @app.task(name="sync", unique_while="active", unique_key=lambda n: f"sync:{n}")
    def sync(n: int) -> None: ...

    @app.task(name="digest", unique_for=timedelta(hours=1), unique_key=lambda n: f"d:{n}")
    def digest(n: int) -> None: ...

    active = sync.delay(1).refresh()
    period = digest.delay(2).refresh()
    plain = app.tasks["sync"].apply_async([3], idempotency_key="life").refresh()
    assert (active.row.unique_key, active.row.unique_window_start) == ("sync:1", None)
    start, end = period.row.unique_window_start, period.row.unique_window_end
    assert period.row.unique_key == "d:2"
    assert start is not None and end is not None and end - start == timedelta(hours=1)
    assert start.timestamp() % 3600 == 0, "windows are aligned to the epoch"
    assert plain.row.unique_key is not None  # a per-call key keeps the task's scope

    show = cli_runner(app)
    assert "unique key:      sync:1 (while active)" in show("jobs", "show", str(active.id)).stdout
    shown = show("jobs", "show", str(period.id)).stdout
    assert "unique key:      d:2 (for the window " in shown, shown
