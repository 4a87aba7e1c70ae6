"""Priority aging per queue (``app.queue(name, priority_aging=)``) and for limited and fair
jobs (the limited claim, migration 0026): the claim orders by effective priority, reads
the claim index (auto_explain of the function's statements), and a real worker starts a
low-priority job under a continuous stream of higher-priority work."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from pgtasks import App, ConfigurationError, Worker
from pgtasks._leases import ClaimedJob, ClaimRequest
from tests.support.inprocess import running_worker
from tests.support.waiting import wait_until


def _claim(app: App, limit: int, **request: Any) -> list[ClaimedJob]:
    with app.connection() as conn:
        worker = app.queries.register_worker(conn, hostname="h", pid=1, queues=None, concurrency=8)
        claim = ClaimRequest(worker, limit, **request)
        return list(app.queries.finish_and_claim_jobs(conn, (), claim).claimed)


def _age(admin: psycopg.Connection[Any], app: App, ids: list[int], seconds: float) -> None:
    admin.execute(
        f"UPDATE {app.schema}.jobs SET run_at = now() - make_interval(secs => %s)"
        " WHERE id = ANY(%s)",
        (seconds, ids),
    )


def test_a_queues_own_interval_ages_its_jobs_only(
    make_app: Any, admin: psycopg.Connection[Any]
) -> None:
    app = make_app()
    assert app.queue("slow", priority_aging=10) == "slow"

    @app.task
    def work(n: int) -> None: ...

    slow = work.apply_async((0,), priority=0, queue="slow").id
    other = work.apply_async((1,), priority=0).id
    high = [work.apply_async((n,), priority=5).id for n in range(2)]
    _age(admin, app, [slow, other], 61)  # slow: effective 6; other: no aging, 0
    _age(admin, app, high, 1)
    aging = (("slow", 10.0),)
    assert Worker(app).settings.queue_aging == aging
    # (A claim's jobs come back in stored claim order.)
    assert {job.id for job in _claim(app, 2, queue_aging=aging)} == {slow, high[0]}
    assert {job.id for job in _claim(app, 1, queue_aging=aging)} == {high[1]}


def test_a_queues_interval_replaces_the_apps(make_app: Any, admin: psycopg.Connection[Any]) -> None:
    app = make_app(priority_aging=10)
    app.queue("patient", priority_aging=1000)

    @app.task
    def work(n: int) -> None: ...

    patient = work.apply_async((0,), queue="patient").id
    default = work.apply_async((1,)).id
    high = work.apply_async((2,), priority=5).id
    _age(admin, app, [patient, default], 61)  # patient: 0 levels; default: 6
    _age(admin, app, [high], 1)
    aging = {"aging": 10.0, "queue_aging": (("patient", 1000.0),)}
    assert [job.id for job in _claim(app, 1, **aging)] == [default]
    assert [job.id for job in _claim(app, 1, **aging)] == [high]
    assert [job.id for job in _claim(app, 1, **aging)] == [patient]


@pytest.mark.parametrize("kind", ["fair", "limited"])
def test_aging_reorders_limited_and_fair_jobs(
    make_app: Any, admin: psycopg.Connection[Any], kind: str
) -> None:
    app = make_app()
    app.queue("slow", priority_aging=10)
    options: dict[str, Any] = (
        {"fair_key": lambda key, n: key} if kind == "fair" else {"concurrency": 50}
    )

    @app.task(**options)
    def work(key: str, n: int) -> None: ...

    low = work.apply_async(("b", 0), priority=0, queue="slow").id
    high = [work.apply_async(("a", n), priority=5).id for n in range(3)]
    _age(admin, app, [low], 61)
    _age(admin, app, high, 1)
    limited = {"limited": True}
    # Without aging the stored priorities decide.
    assert [job.id for job in _claim(app, 1, **limited)] == [high[0]]
    # The slow queue's interval: low's effective priority 6 beats 5.
    aged = _claim(app, 1, queue_aging=(("slow", 10.0),), **limited)
    assert [job.id for job in aged] == [low]
    assert all(job.limited for job in aged)
    # The App's interval for every queue, the same way.
    rest = _claim(app, 5, aging=1000.0, **limited)
    assert [job.id for job in rest] == high[1:]


def test_the_aged_limited_claim_reads_the_claim_index(
    make_app: Any, admin: psycopg.Connection[Any]
) -> None:
    app = make_app(priority_aging=5)

    @app.task(fair_key=lambda key, n: key)
    def work(key: str, n: int) -> None: ...

    work.delay_many([{"key": f"k{n % 7}", "n": n} for n in range(500)])
    for priority in (3, 7):
        work.apply_async(("k", priority), priority=priority)
    admin.execute(f"ANALYZE {app.schema}.jobs")
    try:
        admin.execute("LOAD 'auto_explain'")
    except psycopg.Error as error:
        pytest.skip(f"auto_explain cannot be loaded on this server: {error}")
    plans: list[str] = []
    admin.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
    for setting, value in (
        ("auto_explain.log_min_duration", "0"),
        ("auto_explain.log_nested_statements", "on"),
        ("auto_explain.log_level", "notice"),
    ):
        admin.execute("SELECT set_config(%s, %s, false)", (setting, value))
    worker = admin.execute(
        f"INSERT INTO {app.schema}.workers (hostname, pid, queues, concurrency)"
        " VALUES ('h', 1, NULL, 8) RETURNING id"
    ).fetchone()
    assert worker is not None
    claim = ClaimRequest(worker[0], 10, limited=True, aging=5.0)
    claimed = app.queries.finish_and_claim_jobs(admin, (), claim).claimed
    admin.execute("SELECT set_config('auto_explain.log_min_duration', '-1', false)")
    assert len(claimed) == 10
    candidates = [plan for plan in plans if "WITH RECURSIVE levels" in plan]
    assert candidates, plans
    for plan in candidates:
        assert "jobs_fair_claim_idx" in plan or "jobs_limited_claim_idx" in plan, plan
        assert "Seq Scan" not in plan, plan


def test_a_bad_queue_interval_is_refused(make_app: Any) -> None:
    app = make_app(migrate=False)
    for bad in (0, -1, float("nan"), "5", True):
        with pytest.raises(ConfigurationError, match="priority_aging="):
            app.queue("q", priority_aging=bad)
    assert "q" not in app.queue_limits


@pytest.mark.parametrize("kind", ["plain", "fair"])
def test_a_low_priority_job_starts_under_a_stream_of_higher_priority_work(
    make_app: Any, dsn: str, kind: str
) -> None:
    """A feeder keeps higher-priority jobs waiting until the low-priority one has run:
    without aging it would never start (the backlog never empties); with its queue's
    interval it starts while older higher-priority jobs still wait."""
    app = make_app()
    app.queue("slow", priority_aging=0.05)
    options: dict[str, Any] = {"fair_key": lambda key, n: key} if kind == "fair" else {}

    @app.task(priority=5, **options)
    def high(key: str, n: int) -> None: ...

    @app.task(queue="slow", **options)
    def low(key: str, n: int) -> None: ...

    stop = threading.Event()
    failures: list[BaseException] = []
    pending = f"SELECT count(*) FROM {app.schema}.jobs WHERE task_name = %s AND status = 'pending'"

    def feed() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                while not stop.is_set():
                    row = conn.execute(pending, (high.name,)).fetchone()
                    if row is not None and row[0] < 200:
                        high.delay_many([{"key": "a", "n": n} for n in range(300)])
                    stop.wait(0.005)
        except BaseException as error:
            failures.append(error)

    feeder = threading.Thread(target=feed, name="test-feeder", daemon=True)
    feeder.start()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            wait_until(lambda: (conn.execute(pending, (high.name,)).fetchone() or [0])[0] > 0)
        handle = low.delay("b", 0)
        with running_worker(app, concurrency=4):
            wait_until(
                lambda: handle.status().value == "done",
                timeout=60,
                message="the low-priority job to run",
            )
    finally:
        stop.set()
        feeder.join(10)
    assert not failures, failures
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT count(*) FROM {app.schema}.all_jobs AS h, {app.schema}.all_jobs AS l"
            " WHERE l.id = %s AND h.task_name = %s AND h.run_at < l.started_at"
            " AND (h.started_at IS NULL OR h.started_at > l.started_at)",
            (handle.id, high.name),
        ).fetchone()
    # Higher-priority jobs due before it started were still waiting when it did.
    assert row is not None and row[0] > 0


def test_a_hand_written_run_at_of_minus_infinity_ages_without_error(
    make_app: Any, admin: psycopg.Connection[Any]
) -> None:
    app = make_app(priority_aging=10)

    @app.task(fair_key=lambda key, n: key)
    def work(key: str, n: int) -> None: ...

    odd = work.apply_async(("b", 0), priority=-5).id
    high = work.apply_async(("a", 1), priority=5).id
    admin.execute(f"UPDATE {app.schema}.jobs SET run_at = '-infinity' WHERE id = %s", (odd,))
    with app.connection() as conn:
        worker = app.queries.register_worker(conn, hostname="h", pid=1, queues=None, concurrency=8)
        claim = ClaimRequest(worker, 1, limited=True, aging=10.0)
        trip = app.queries.finish_and_claim_jobs(conn, (), claim)
    # Waited "for ever": the highest effective priority, and no error in the report.
    assert [job.id for job in trip.claimed] == [odd]
    assert trip.report.error is None
    assert [job.id for job in _claim(app, 1, limited=True, aging=10.0)] == [high]
