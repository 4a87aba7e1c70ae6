"""notify_enqueues=False: a one-job enqueue sends no NOTIFY; idle workers poll for it.

PostgreSQL serializes the commits of every transaction that notified (a lock on the
notification queue held through the commit), so many concurrent producers enqueue
several times faster without it (benchmarks/producers.py). Every other insert path (bulk,
the caller's transaction, raw SQL) keeps notifying through the trigger.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgtasks import App, ConfigurationError, JobStatus
from pgtasks._store.notify_mode import EnqueueNotifications
from tests.support.inprocess import running_worker

Connection = psycopg.Connection[Any]


@pytest.fixture
def quiet(make_app: Callable[..., App], app: App) -> App:
    """An App of the same schema as ``app`` whose one-job enqueues do not notify."""
    return make_app(schema=app.schema, migrate=False, notify_enqueues=False)


def test_a_quiet_one_job_enqueue_sends_nothing_and_others_still_notify(
    app: App, quiet: App, notifications: Callable[[str], list[str]]
) -> None:
    @quiet.task(name="echo", queue="echo")
    def echo() -> None: ...

    echo.delay()
    echo.apply_async(queue="also-quiet")
    echo.delay_many([{}, {}])  # one statement, the trigger: notifies its queue once
    asyncio.run(echo.adelay())

    @app.task(name="marker", queue="marker")
    def marker() -> None: ...

    marker.delay()  # the default app notifies

    # Notifications arrive in commit order: only the bulk insert's came before the marker.
    assert notifications("marker") == ["echo", "marker"]


def test_a_quiet_enqueue_in_the_callers_transaction_still_notifies_at_commit(
    quiet: App, dsn: str, notifications: Callable[[str], list[str]]
) -> None:
    @quiet.task(name="echo", queue="in-transaction")
    def echo() -> None: ...

    with psycopg.connect(dsn) as conn:
        echo.apply_async(connection=conn)
    echo.apply_async(queue="after")  # quiet: no notification of its own
    with psycopg.connect(dsn, autocommit=True) as conn:
        channel = sql.Literal(quiet.queries.channel)
        conn.execute(sql.SQL("SELECT pg_notify({}, 'marker')").format(channel))
    assert notifications("marker") == ["in-transaction", "marker"]


def test_a_worker_runs_quiet_enqueues_by_polling(quiet: App) -> None:
    ran: list[int] = []

    @quiet.task(name="mark")
    def mark(n: int) -> None:
        ran.append(n)

    # The default poll interval: an idle worker looks for jobs every second.
    with running_worker(quiet, poll_interval=1.0):
        jobs = [mark.delay(n) for n in range(3)]
        for job in jobs:
            job.get(timeout=30)
            assert job.status() is JobStatus.DONE
    assert sorted(ran) == [0, 1, 2]


@pytest.mark.parametrize("value", ["yes", 1, "false"])
def test_notify_enqueues_must_be_a_bool(value: Any) -> None:
    with pytest.raises(ConfigurationError, match="notify_enqueues= must be True or False"):
        App("postgresql://localhost/x", notify_enqueues=value)


def test_the_environment_sets_it_and_a_bad_value_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PGTASKS_NOTIFY_ENQUEUES", "false")
    assert App("postgresql://localhost/x").settings.database.notify_enqueues is False
    assert App("postgresql://localhost/x", notify_enqueues=True).queries.notify_enqueues
    monkeypatch.setenv("PGTASKS_NOTIFY_ENQUEUES", "maybe")
    with pytest.raises(ConfigurationError, match="PGTASKS_NOTIFY_ENQUEUES must be true or"):
        App("postgresql://localhost/x")


# -- notify="always" | "off" | "auto" ---------------------------------------------------------


@pytest.mark.parametrize("value", ["sometimes", "", 1, True])
def test_the_notify_mode_is_validated(value: Any) -> None:
    with pytest.raises(ConfigurationError, match="notify= must be one of 'always', 'off', 'auto'"):
        App("postgresql://localhost/x", notify=value)


def test_notify_and_notify_enqueues_must_agree_and_the_environment_sets_the_mode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ConfigurationError, match="disagree"):
        App("postgresql://localhost/x", notify="off", notify_enqueues=True)
    assert (
        App("postgresql://localhost/x", notify="auto", notify_enqueues=True).queries.notify_mode
        == "auto"
    )
    assert App("postgresql://localhost/x", notify_enqueues=False).queries.notify_mode == "off"
    assert App("postgresql://localhost/x").settings.database.notify == "always"
    monkeypatch.setenv("PGTASKS_NOTIFY", "Auto")
    monkeypatch.setenv("PGTASKS_NOTIFY_ENQUEUES", "false")  # PGTASKS_NOTIFY wins
    assert App("postgresql://localhost/x").settings.database.notify == "auto"
    assert App("postgresql://localhost/x", notify="off").queries.notify_enqueues is False
    monkeypatch.setenv("PGTASKS_NOTIFY", "never")
    with pytest.raises(ConfigurationError, match="PGTASKS_NOTIFY must be one of"):
        App("postgresql://localhost/x")


def test_auto_notifies_a_queue_at_most_once_per_spacing(
    make_app: Callable[..., App], app: App, notifications: Callable[[str], list[str]]
) -> None:
    auto = make_app(schema=app.schema, migrate=False, notify="auto")
    # A spacing no test run outlasts: one notification per queue, then none.
    auto.queries.notifications = EnqueueNotifications("auto", spacing=3600.0)

    @auto.task(name="echo", queue="burst")
    def echo() -> None: ...

    for _ in range(5):
        echo.delay()
    echo.apply_async(queue="other")
    asyncio.run(echo.adelay())
    echo.delay_many([{}, {}])  # bulk: the trigger notifies in every mode

    @app.task(name="marker", queue="marker")
    def marker() -> None: ...

    marker.delay()
    assert notifications("marker") == ["burst", "other", "burst", "marker"]


def test_auto_notifies_again_once_the_spacing_passed() -> None:
    decide = EnqueueNotifications("auto", spacing=0.0)
    assert decide.should_notify("q") and decide.should_notify("q")
    spaced = EnqueueNotifications("auto", spacing=3600.0)
    assert spaced.should_notify("q") and not spaced.should_notify("q")
    assert spaced.should_notify("r")
    assert EnqueueNotifications("always").should_notify("q")
    assert not EnqueueNotifications("off").should_notify("q")


def test_with_notifications_off_a_worker_polls_soon_after_jobs(
    make_app: Callable[..., App], app: App
) -> None:
    off = make_app(schema=app.schema, migrate=False, notify="off")

    @off.task(name="mark")
    def mark(n: int) -> int:
        return n

    first = mark.delay(1)
    # A poll interval far longer than the wait below: once it found a job, the worker
    # polls again after ADAPTIVE_POLL_MIN, then twice as late each empty poll, so a job
    # enqueued without a notification soon after is found long before poll_interval.
    with running_worker(off, poll_interval=120.0):
        assert first.get(timeout=30) == 1
        second = mark.delay(2)
        assert second.get(timeout=30) == 2
