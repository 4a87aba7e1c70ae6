"""Periodic schedules and the in-process Beat against a real PostgreSQL.

Declarations, one pass at a time (``Beat.run_pass`` with simulated outages), and Beats
running in threads (ticks every second). Real ``pgtasks beat`` processes are in
tests/acceptance/test_beat_processes.py.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from pgtasks import App, Beat, SchemaNotMigratedError, Task, TaskRegistrationError
from pgtasks._app.schedules import format_schedules, schedule_statuses
from pgtasks._cron import format_tick
from pgtasks._store.queries import ADVISORY_LOCK_CLASS_BEAT
from tests.support.waiting import wait_until

SECOND = timedelta(seconds=1)


# -- helpers --


def periodic_jobs(admin: psycopg.Connection[Any], app: App, name: str) -> list[dict[str, Any]]:
    """The jobs of one schedule (by key prefix), oldest tick first."""
    query = sql.SQL(
        "SELECT id, idempotency_key, run_at, created_at, args, kwargs, queue, priority"
        " FROM {}.all_jobs WHERE starts_with(idempotency_key, %s) ORDER BY run_at, id"
    ).format(sql.Identifier(app.schema))
    with admin.cursor(row_factory=dict_row) as cursor:
        return cursor.execute(query, [f"pgtasks.periodic:{name}@"]).fetchall()


def ticks_of(admin: psycopg.Connection[Any], app: App, name: str) -> list[datetime]:
    ticks = [row["run_at"] for row in periodic_jobs(admin, app, name)]
    assert len(ticks) == len(set(ticks)), f"duplicate ticks: {ticks}"
    return ticks


def assert_contiguous(ticks: list[datetime], step: timedelta = SECOND) -> None:
    gaps = [later - earlier for earlier, later in itertools.pairwise(ticks)]
    assert all(gap == step for gap in gaps), [format_tick(tick) for tick in ticks]


def state(admin: psycopg.Connection[Any], app: App, name: str) -> dict[str, Any] | None:
    query = sql.SQL("SELECT * FROM {}.periodic WHERE name = %s").format(sql.Identifier(app.schema))
    with admin.cursor(row_factory=dict_row) as cursor:
        return cursor.execute(query, [name]).fetchone()


def rewind(admin: psycopg.Connection[Any], app: App, name: str, seconds: float) -> None:
    """Simulate an outage: the schedule was last handled ``seconds`` earlier."""
    query = sql.SQL(
        "UPDATE {}.periodic SET processed_until = processed_until - make_interval(secs => %s)"
        " WHERE name = %s"
    ).format(sql.Identifier(app.schema))
    admin.execute(query, [seconds, name])


def beat_lock_holders(admin: psycopg.Connection[Any], app: App) -> list[int]:
    """Backend pids holding the schema's beat lock (the key halves as pg_locks shows them)."""
    rows = admin.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND classid = %s::bigint::oid"
        " AND objid = ((hashtext(%s)::bigint + 4294967296) %% 4294967296)::oid",
        [ADVISORY_LOCK_CLASS_BEAT, app.schema],
    ).fetchall()
    return [row[0] for row in rows]


def backend_pids(admin: psycopg.Connection[Any]) -> list[int]:
    """Backend pids of the beats of this test process."""
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
        [f"pgtasks-beat:{os.getpid()}"],
    ).fetchall()
    return [row[0] for row in rows]


@contextlib.contextmanager
def running(*beats: Beat) -> Iterator[list[BaseException]]:
    """Run beats in threads; stop them (and check they stopped) on exit."""
    errors: list[BaseException] = []

    def run(beat: Beat) -> None:
        try:
            beat.run()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(beat,), daemon=True) for beat in beats]
    for thread in threads:
        thread.start()
    try:
        yield errors
    finally:
        for beat in beats:
            assert beat.stop(timeout=10), "beat did not stop"
        for thread in threads:
            thread.join(5)
    assert not errors, errors


def every_second(app: App, name: str = "tick", **options: Any) -> Task[Any, Any]:
    @app.task(name=f"{name}.task")
    def tick(label: str = "") -> str:
        return label

    app.add_periodic(tick, every=SECOND, name=name, **options)
    return tick


@pytest.fixture
def connect(dsn: str) -> Iterator[Callable[[], psycopg.Connection[Any]]]:
    connections: list[psycopg.Connection[Any]] = []

    def factory() -> psycopg.Connection[Any]:
        conn = psycopg.connect(dsn, autocommit=True)
        connections.append(conn)
        return conn

    yield factory
    for conn in connections:
        conn.close()


# -- declaring schedules --


def test_periodic_decorator_declares_a_schedule_and_returns_the_task(
    make_app: Callable[..., App],
) -> None:
    app = make_app(migrate=False)

    @app.periodic(cron="*/5 * * * *", tz="Europe/Berlin", kwargs={"region": "eu"}, queue="q")
    @app.task(name="reports.rollup")
    def rollup(region: str) -> None: ...

    assert isinstance(rollup, Task)
    schedule = app.schedules["reports.rollup@*/5 * * * * Europe/Berlin"]
    assert schedule.task_name == "reports.rollup"
    assert schedule.kwargs == {"region": "eu"}
    assert schedule.queue == "q"
    assert schedule.catch_up == "latest"
    assert schedule.trigger.describe() == "cron '*/5 * * * *' Europe/Berlin"


def test_add_periodic_accepts_a_task_or_its_name_at_run_time(make_app: Callable[..., App]) -> None:
    app = make_app(migrate=False)

    @app.task(name="cleanup")
    def cleanup(days: int = 7) -> None: ...

    by_task = app.add_periodic(cleanup, every=timedelta(hours=1), args=(3,), catch_up="all")
    by_name = app.add_periodic("cleanup", cron="0 4 * * *", max_catch_up=3)

    assert by_task.name == "cleanup@every 3600s"
    assert by_task.args == (3,)
    assert by_name.name == "cleanup@0 4 * * *"
    assert set(app.schedules) == {by_task.name, by_name.name}


def test_duplicate_schedule_names_raise(make_app: Callable[..., App]) -> None:
    app = make_app(migrate=False)

    @app.task(name="sync")
    def sync(full: bool = False) -> None: ...

    app.add_periodic(sync, cron="0 * * * *")
    with pytest.raises(TaskRegistrationError, match="a schedule named 'sync@0 \\* \\* \\* \\*'"):
        app.add_periodic(sync, cron="0 * * * *", kwargs={"full": True})
    app.add_periodic(sync, cron="0 * * * *", kwargs={"full": True}, name="sync-full")
    with pytest.raises(TaskRegistrationError, match="'sync-full' already exists"):
        app.add_periodic(sync, every=SECOND, name="sync-full")


def test_invalid_cron_and_unknown_zone_raise_at_declaration_quoting_them(
    make_app: Callable[..., App],
) -> None:
    app = make_app(migrate=False)

    @app.task
    def job() -> None: ...

    with pytest.raises(TaskRegistrationError, match="invalid cron expression '\\*/5 \\* \\*'"):
        app.periodic(cron="*/5 * *")(job)
    with pytest.raises(TaskRegistrationError, match="unknown time zone 'Mars/Olympus'"):
        app.add_periodic(job, cron="0 9 * * *", tz="Mars/Olympus")
    assert app.schedules == {}


def test_schedule_arguments_are_checked_at_declaration(make_app: Callable[..., App]) -> None:
    app = make_app(migrate=False)

    @app.task(name="send")
    def send(to: str) -> None: ...

    with pytest.raises(TaskRegistrationError, match=r"schedule 'send@0 9 \* \* \*'.*'to'"):
        app.add_periodic(send, cron="0 9 * * *")
    with pytest.raises(TaskRegistrationError, match="cannot be stored as JSON"):
        app.add_periodic(send, cron="0 9 * * *", kwargs={"to": object()})
    with pytest.raises(TaskRegistrationError, match="priority"):
        app.add_periodic(send, cron="0 9 * * *", kwargs={"to": "a"}, priority="high")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unknown periodic option\\(s\\): cronn"):
        app.add_periodic(send, cronn="0 9 * * *")  # type: ignore[call-arg]
    assert app.schedules == {}


def test_periodic_needs_a_registered_task(make_app: Callable[..., App]) -> None:
    app = make_app(migrate=False)
    other = make_app(migrate=False)

    def plain() -> None: ...

    @other.task
    def foreign() -> None: ...

    with pytest.raises(
        TaskRegistrationError, match=r"stack @app\.periodic\(\.\.\.\) above @app\.task"
    ):
        app.periodic(every=SECOND)(plain)  # type: ignore[type-var]
    with pytest.raises(TaskRegistrationError, match="is not registered with this app"):
        app.add_periodic(foreign, every=SECOND)


# -- one pass at a time --


def test_first_pass_enqueues_nothing_for_the_past_and_records_the_schedule(
    app: App, admin: psycopg.Connection[Any], connect: Callable[[], psycopg.Connection[Any]]
) -> None:
    app.add_periodic(every_second(app, "s1"), cron="* * * * *", name="minutely")
    beat = Beat(app)

    result = beat.run_pass(connect())

    assert result.enqueued == ()
    assert periodic_jobs(admin, app, "s1") == [] == periodic_jobs(admin, app, "minutely")
    stored = state(admin, app, "minutely")
    assert stored is not None
    assert stored["processed_until"] == result.now
    assert stored["last_tick"] is None
    assert 0 < result.wait <= 1.0


def test_the_job_of_a_tick_is_due_at_the_tick_with_the_schedules_options(
    app: App, admin: psycopg.Connection[Any], connect: Callable[[], psycopg.Connection[Any]]
) -> None:
    every_second(app, "opts", kwargs={"label": "x"}, queue="periodic", priority=7)
    beat, conn = Beat(app), connect()
    beat.run_pass(conn)
    rewind(admin, app, "opts", 1.5)

    result = beat.run_pass(conn)

    jobs = periodic_jobs(admin, app, "opts")
    assert [(item.job_id, item.existed) for item in result.enqueued] == [
        (job["id"], False) for job in jobs
    ]
    for job, item in zip(jobs, result.enqueued, strict=True):
        assert job["run_at"] == item.tick
        assert job["idempotency_key"] == f"pgtasks.periodic:opts@{format_tick(item.tick)}"
        assert (job["kwargs"], job["queue"], job["priority"]) == ({"label": "x"}, "periodic", 7)
    stored = state(admin, app, "opts")
    assert stored is not None
    assert (stored["last_tick"], stored["last_job_id"]) == (jobs[-1]["run_at"], jobs[-1]["id"])


def test_a_tick_enqueued_before_is_not_enqueued_again(
    app: App, admin: psycopg.Connection[Any], connect: Callable[[], psycopg.Connection[Any]]
) -> None:
    every_second(app, "again")
    first, second = Beat(app), Beat(app)
    first.run_pass(connect())
    rewind(admin, app, "again", 3)
    enqueued = first.run_pass(connect()).enqueued
    # A second beat that read the state before the first one advanced it: same ticks.
    rewind(admin, app, "again", 3.5)

    repeated = second.run_pass(connect()).enqueued

    assert len(enqueued) >= 3
    old = {item.tick: item.job_id for item in enqueued}
    assert {item.tick: item.job_id for item in repeated if item.tick in old} == old
    assert all(item.existed for item in repeated if item.tick in old)
    assert len(ticks_of(admin, app, "again")) == len({*old, *(item.tick for item in repeated)})


@pytest.mark.parametrize(
    ("catch_up", "max_catch_up"), [("latest", 100), ("all", 100), ("all", 5), ("none", 100)]
)
def test_catch_up_policy_decides_what_a_long_outage_enqueues(
    app: App,
    admin: psycopg.Connection[Any],
    connect: Callable[[], psycopg.Connection[Any]],
    catch_up: Any,
    max_catch_up: int,
) -> None:
    every_second(app, "outage", catch_up=catch_up, max_catch_up=max_catch_up)
    beat, conn = Beat(app, grace=2.0), connect()
    started = beat.run_pass(conn).now
    rewind(admin, app, "outage", 30)

    result = beat.run_pass(conn)

    ticks = ticks_of(admin, app, "outage")
    assert [item.tick for item in result.enqueued] == ticks
    newest = result.now.replace(microsecond=0)
    assert ticks[-1] == newest
    assert_contiguous(ticks)
    missed_since = started - timedelta(seconds=30)
    if catch_up == "latest":
        assert len(ticks) == 1
    elif catch_up == "all" and max_catch_up == 5:
        assert len(ticks) == 5
    elif catch_up == "all":
        assert ticks[0] == (missed_since + SECOND).replace(microsecond=0)
    else:
        assert all(tick > result.now - timedelta(seconds=2) for tick in ticks)
        assert 1 <= len(ticks) <= 2


@pytest.mark.parametrize("catch_up", ["latest", "none"])
def test_a_short_outage_within_the_grace_period_loses_no_tick(
    app: App,
    admin: psycopg.Connection[Any],
    connect: Callable[[], psycopg.Connection[Any]],
    catch_up: Any,
) -> None:
    every_second(app, "blip", catch_up=catch_up)
    beat, conn = Beat(app, grace=60), connect()
    started = beat.run_pass(conn).now
    rewind(admin, app, "blip", 20)

    result = beat.run_pass(conn)

    ticks = ticks_of(admin, app, "blip")
    assert_contiguous(ticks)
    assert ticks[0] == (started - timedelta(seconds=19)).replace(microsecond=0)
    assert ticks[-1] == result.now.replace(microsecond=0)


def test_state_of_a_schedule_removed_from_code_is_kept_and_ignored(
    app: App, admin: psycopg.Connection[Any], connect: Callable[[], psycopg.Connection[Any]]
) -> None:
    admin.execute(
        sql.SQL(
            "INSERT INTO {}.periodic (name, processed_until, last_tick, last_job_id)"
            " VALUES ('gone', now() - interval '1 day', now() - interval '1 day', 41)"
        ).format(sql.Identifier(app.schema))
    )
    every_second(app, "kept")
    beat, conn = Beat(app, grace=5), connect()
    before = state(admin, app, "gone")

    beat.run_pass(conn)
    rewind(admin, app, "kept", 2)
    beat.run_pass(conn)

    assert state(admin, app, "gone") == before
    assert periodic_jobs(admin, app, "gone") == []
    now, statuses = schedule_statuses(app)
    gone = next(status for status in statuses if status.name == "gone")
    assert not gone.declared and gone.last_job_id == 41 and gone.next_tick is None
    assert "(not declared in code: ignored)" in format_schedules(now, statuses)


def test_schedule_statuses_show_next_run_in_zone_and_utc_and_the_last_tick(
    app: App, admin: psycopg.Connection[Any], connect: Callable[[], psycopg.Connection[Any]]
) -> None:
    task = every_second(app, "status")
    nightly = app.add_periodic(task, cron="30 2 * * *", tz="America/New_York", name="nightly")
    beat, conn = Beat(app), connect()
    beat.run_pass(conn)
    rewind(admin, app, "status", 1.5)
    enqueued = beat.run_pass(conn).enqueued[-1]

    now, statuses = schedule_statuses(app)

    by_name = {status.name: status for status in statuses}
    assert list(by_name) == ["nightly", "status"]
    night = by_name["nightly"]
    assert night.next_tick == nightly.trigger.next_tick(now)
    assert night.next_tick is not None
    assert night.next_tick_local is not None
    assert night.next_tick_local.endswith((" EST", " EDT"))
    assert night.next_tick_local[11:16] in ("02:30", "03:00")
    assert night.last_tick is None
    assert (by_name["status"].last_tick, by_name["status"].last_job_id) == (
        enqueued.tick,
        enqueued.job_id,
    )
    table = format_schedules(now, statuses)
    assert format_tick(night.next_tick) in table
    assert f"{format_tick(enqueued.tick)} (job {enqueued.job_id})" in table


# -- beats in threads --


def test_running_beat_enqueues_one_job_per_second_close_to_the_tick(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    every_second(app, "live")
    cron_task = app.tasks["live.task"]
    app.add_periodic(cron_task, cron="* * * * * *", name="live-cron")
    beat = Beat(app)

    with running(beat):
        wait_until(lambda: len(ticks_of(admin, app, "live")) >= 3, timeout=6)
        assert beat.is_leader

    for name in ("live", "live-cron"):
        rows = periodic_jobs(admin, app, name)
        assert_contiguous([row["run_at"] for row in rows])
        lags = [row["created_at"] - row["run_at"] for row in rows]
        assert all(timedelta(0) <= lag < timedelta(milliseconds=500) for lag in lags), lags
    assert ticks_of(admin, app, "live") == ticks_of(admin, app, "live-cron")


def test_beats_without_leader_election_still_enqueue_exactly_one_job_per_tick(
    app: App, admin: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    every_second(app, "crowd")
    beats = [Beat(app, leader_election=False) for _ in range(3)]

    with caplog.at_level(logging.DEBUG, logger="pgtasks.beat"), running(*beats):
        wait_until(lambda: len(ticks_of(admin, app, "crowd")) >= 3, timeout=6)
        assert all(beat.is_leader for beat in beats)

    assert_contiguous(ticks_of(admin, app, "crowd"))
    # The key, not the lock, kept the duplicates out: other beats met existing jobs.
    assert any("was already enqueued" in record.getMessage() for record in caplog.records)


def test_one_beat_is_active_and_a_standby_takes_over_when_it_stops(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    every_second(app, "relay")
    first, second = Beat(app, lock_retry_interval=0.2), Beat(app, lock_retry_interval=0.2)

    with running(first, second):
        wait_until(lambda: first.is_leader or second.is_leader, timeout=5)
        wait_until(lambda: len(ticks_of(admin, app, "relay")) >= 2, timeout=5)
        leader, standby = (first, second) if first.is_leader else (second, first)
        assert not standby.is_leader
        assert len(beat_lock_holders(admin, app)) == 1
        assert leader.stop(timeout=5)
        wait_until(lambda: standby.is_leader, timeout=3, message="standby takes over")
        count = len(ticks_of(admin, app, "relay"))
        wait_until(lambda: len(ticks_of(admin, app, "relay")) >= count + 2, timeout=5)

    assert_contiguous(ticks_of(admin, app, "relay"))


def test_beat_reconnects_when_its_connection_is_terminated_and_loses_no_tick(
    app: App, admin: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    every_second(app, "phoenix")
    beat = Beat(app)

    with caplog.at_level(logging.INFO, logger="pgtasks.beat"), running(beat):
        wait_until(lambda: len(ticks_of(admin, app, "phoenix")) >= 1, timeout=5)
        [pid] = wait_until(lambda: backend_pids(admin), timeout=5)
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        wait_until(lambda: backend_pids(admin) not in ([], [pid]), timeout=5)
        count = len(ticks_of(admin, app, "phoenix"))
        wait_until(lambda: len(ticks_of(admin, app, "phoenix")) >= count + 2, timeout=5)

    assert_contiguous(ticks_of(admin, app, "phoenix"))
    messages = [record.getMessage() for record in caplog.records]
    assert any(message.startswith("beat lost the database") for message in messages)
    assert any(message.startswith("beat reconnected") for message in messages)


def test_beat_keeps_retrying_an_unreachable_database_and_stops_promptly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = App("postgresql://pgtasks:hunter2@127.0.0.1:1/none", schema="unreachable")
    every_second(app, "void")
    beat = Beat(app, reconnect_max=0.2)

    with caplog.at_level(logging.WARNING, logger="pgtasks.beat"), running(beat):
        wait_until(
            lambda: sum("beat lost the database" in r.getMessage() for r in caplog.records) >= 3,
            timeout=10,
        )
    assert not any("hunter2" in record.getMessage() for record in caplog.records)


def test_beat_refuses_a_schema_that_is_not_migrated(make_app: Callable[..., App]) -> None:
    app = make_app(migrate=False)
    every_second(app, "early")

    with pytest.raises(SchemaNotMigratedError, match="pgtasks migrate"):
        Beat(app).run()


def test_stop_before_run_makes_run_return_at_once_and_a_beat_runs_once(app: App) -> None:
    every_second(app, "once")
    beat = Beat(app)

    assert beat.stop(timeout=0)
    beat.run()

    with pytest.raises(RuntimeError, match="already run"):
        beat.run()


def test_sigterm_stops_a_beat_running_with_signal_handlers(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    every_second(app, "signalled")
    beat = Beat(app)
    before = signal.getsignal(signal.SIGTERM)

    def terminate_when_active() -> None:
        wait_until(lambda: beat.is_leader, timeout=5)
        wait_until(lambda: ticks_of(admin, app, "signalled"), timeout=5)
        os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=terminate_when_active, daemon=True)
    killer.start()
    # The handler runs in this (main) thread, which is run()'s: stop() cannot wait there.
    beat.run(install_signal_handlers=True)
    killer.join(5)

    assert signal.getsignal(signal.SIGTERM) is before
    assert beat.stop(timeout=0)
    assert not beat.is_leader
    assert beat_lock_holders(admin, app) == []


# -- store --


def test_beat_lock_is_exclusive_per_schema(
    make_app: Callable[..., App], connect: Callable[[], psycopg.Connection[Any]]
) -> None:
    first, second = make_app(migrate=False), make_app(migrate=False)
    one, two, three = connect(), connect(), connect()

    assert first.queries.lock_beat(one)
    assert not first.queries.lock_beat(two)
    assert second.queries.lock_beat(three)
    assert first.queries.unlock_beat(one)
    assert first.queries.lock_beat(two)


def test_advancing_a_schedule_never_moves_it_backwards(
    app: App, admin: psycopg.Connection[Any], connect: Callable[[], psycopg.Connection[Any]]
) -> None:
    conn = connect()
    [row] = app.queries.load_periodic(conn, ["s"])
    now = row["now"]
    app.queries.advance_periodic(conn, [("s", now + 10 * SECOND, now + 5 * SECOND, 9)])

    app.queries.advance_periodic(conn, [("s", now + 2 * SECOND, now + SECOND, 3)])
    app.queries.advance_periodic(conn, [("s", now + 20 * SECOND, None, None)])

    stored = state(admin, app, "s")
    assert stored is not None
    assert stored["processed_until"] == now + 20 * SECOND
    assert (stored["last_tick"], stored["last_job_id"]) == (now + 5 * SECOND, 9)
