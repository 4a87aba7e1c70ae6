"""notify_enqueues=False: a one-job enqueue sends no NOTIFY; idle workers poll for it.

PostgreSQL serializes the commits of every transaction that notified (a lock on the
notification queue held through the commit), so many concurrent producers enqueue
several times faster without it (benchmarks/producers.py). Every other insert path (bulk,
the caller's transaction, raw SQL) keeps notifying through the trigger.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgtasks import App, ConfigurationError, JobStatus
from pgtasks._store.notify_mode import EnqueueNotifications
from tests.support.environment import ROOT, pgtasks_env
from tests.support.inprocess import running_worker
from tests.support.processes import Processes
from tests.support.waiting import wait_until

Connection = psycopg.Connection[Any]
APP_PATH = "tests.apps.basic:app"


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    running = Processes(tmp_path, APP_PATH)
    yield running
    running.close()


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
    auto.queries.notifications = EnqueueNotifications("auto", spacing=60.0)

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


def test_auto_asks_the_gate_unless_this_process_notified_within_the_spacing() -> None:
    spaced = EnqueueNotifications("auto", spacing=60.0)
    assert spaced.params("q") == {"notify": True, "gate": 60.0}
    spaced.sent("q", None)  # the gate was closed: nothing sent, nothing recorded
    assert spaced.params("q") == {"notify": True, "gate": 60.0}
    spaced.sent("q", "")  # sent: this process asks no gate for 60 s
    assert spaced.params("q") == {"notify": False, "gate": 60.0}
    assert spaced.params("r") == {"notify": True, "gate": 60.0}
    assert EnqueueNotifications("always").params("q") == {"notify": True, "gate": None}
    assert EnqueueNotifications("off").params("q") == {"notify": False, "gate": None}


# -- notify_interval= / PGTASKS_NOTIFY_INTERVAL ------------------------------------------------


@pytest.mark.parametrize("value", [0, -0.5, 60.5, float("nan"), float("inf"), True, "0.2", None])
def test_the_notify_interval_is_validated(value: Any) -> None:
    if value is None:  # None is "not given": the environment's, else the default
        assert (
            App("postgresql://localhost/x", notify_interval=value).queries.notifications.spacing
            == 0.2
        )
        return
    with pytest.raises(
        ConfigurationError, match=r"notify_interval= must be a number of seconds > 0 and <= 60"
    ):
        App("postgresql://localhost/x", notify="auto", notify_interval=value)


def test_the_environment_sets_the_notify_interval_and_a_bad_value_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PGTASKS_NOTIFY_INTERVAL", "0.5")
    app = App("postgresql://localhost/x", notify="auto")
    assert app.settings.database.notify_interval == 0.5
    assert app.queries.notifications.spacing == 0.5
    assert (
        App("postgresql://localhost/x", notify_interval=2).settings.database.notify_interval == 2.0
    )
    for text in ("soon", "0", "-1", "nan", "120"):
        monkeypatch.setenv("PGTASKS_NOTIFY_INTERVAL", text)
        with pytest.raises(
            ConfigurationError, match=f"PGTASKS_NOTIFY_INTERVAL must be .*got '{text}'"
        ):
            App("postgresql://localhost/x")


# -- the shared gate (migration shared_notify_gate) ---------------------------------------------


def test_the_gate_skips_a_queue_being_notified_without_waiting(app: App, dsn: str) -> None:
    gate = sql.SQL("SELECT {}.notify_gate_open(%s, %s)").format(sql.Identifier(app.schema))

    def opened(conn: Connection, spacing: float) -> bool:
        row = conn.execute(gate, ("gated", spacing)).fetchone()
        assert row is not None
        return bool(row[0])

    with (
        psycopg.connect(dsn, autocommit=True) as first,
        psycopg.connect(dsn) as notifying,
        psycopg.connect(dsn, autocommit=True) as other,
    ):
        assert opened(first, 60.0)  # the queue's first gated enqueue: its row, stamped
        assert not opened(first, 60.0)  # stamped less than 60 s ago
        assert opened(notifying, 1e-6)  # older than 1 µs: open, row locked until commit
        # Any wait for the locked row would end in an error here, not a False.
        other.execute("SET lock_timeout = '50ms'")
        assert not opened(other, 1e-6)  # being notified right now: skipped, no wait
        notifying.rollback()  # the stamp rolls back with its enqueue
        assert opened(other, 1e-6)


def test_auto_notifies_a_queue_once_across_processes_and_a_worker_finds_the_rest(
    app: App, dsn: str, processes: Processes, notifications: Callable[[str], list[str]]
) -> None:
    """Producer processes with notify="auto" (a spacing no test outlasts): of their ten
    enqueues one notifies; a worker with the default settings runs all ten (the rest
    found by its polls, within poll_interval of their enqueue)."""
    env = pgtasks_env(dsn, app.schema, PGTASKS_NOTIFY="auto", PGTASKS_NOTIFY_INTERVAL="60")
    worker = processes.worker(dsn, app.schema, timing=(), PGTASKS_NOTIFY="auto")
    enqueue = "from tests.apps.basic import ping\nfor n in range(5): ping.delay(n)"
    for _ in range(2):
        subprocess.run([sys.executable, "-c", enqueue], cwd=ROOT, env=env, check=True, timeout=60)

    @app.task(name="marker", queue="marker")
    def marker() -> None: ...

    marker.delay()
    assert notifications("marker") == ["default", "marker"]
    done = sql.SQL(
        "SELECT count(*) FROM {}.all_jobs WHERE task_name LIKE %s AND status = 'done'"
    ).format(sql.Identifier(app.schema))

    def all_done() -> bool:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(done, ("%ping",)).fetchone()
        return row is not None and row[0] == 10

    wait_until(all_done, timeout=60, message="the ten jobs done")
    assert worker.alive()


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
