"""Operations against a real PostgreSQL: stats, job listing, retry, workers, prune, Pruner.

Each test builds a known population with plain SQL (status, finished_at, run_at set
directly), runs the Store query or service under test, and checks exactly which rows
were counted, changed or deleted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from pgtasks import App, ConfigurationError, JobStatus
from pgtasks._operations import QueueStats, WorkerInfo
from pgtasks._store.operations import ADVISORY_LOCK_CLASS_PRUNE
from pgtasks._worker.connection import connector
from pgtasks._worker.pruner import Pruner, prune
from pgtasks._worker.settings import WorkerSettings
from tests.support.inprocess import execute, running_worker, select
from tests.support.population import DAY, insert_job, job_ids, register
from tests.support.waiting import wait_until

Connection = psycopg.Connection[Any]


@pytest.fixture
def conn(app: App) -> Iterator[Connection]:
    """An autocommit connection like the ones the CLI and the Pruner use."""
    with psycopg.connect(app.dsn, autocommit=True) as connection:
        yield connection


# -- stats ----------------------------------------------------------------------------------------
def queue_stats(app: App, conn: Connection) -> dict[str | None, QueueStats]:
    return {row["queue"]: QueueStats.from_row(row) for row in app.queries.get_queue_stats(conn)}


def test_queue_stats_count_each_status_per_queue_and_the_oldest_due_wait(
    app: App, conn: Connection
) -> None:
    insert_job(conn, app, run_in=-120)
    insert_job(conn, app, run_in=-5)
    insert_job(conn, app, run_in=3600)  # scheduled: pending, not due
    insert_job(conn, app, status="running", locked_by=1, attempts=1)
    insert_job(conn, app, status="done", finished_ago=30, attempts=1)
    insert_job(conn, app, queue="emails", status="failed", finished_ago=600, attempts=3)
    insert_job(conn, app, queue="emails", status="cancelled", finished_ago=2 * 3600)

    stats = queue_stats(app, conn)

    default, emails = stats["default"], stats["emails"]
    assert (default.pending, default.due, default.scheduled) == (3, 2, 1)
    assert (default.running, default.done, default.failed, default.cancelled) == (1, 1, 0, 0)
    assert default.oldest_due_age is not None and 120 <= default.oldest_due_age < 130
    assert (emails.pending, emails.failed, emails.cancelled, emails.total) == (0, 1, 1, 2)
    assert emails.oldest_due_age is None
    assert (default.finished_last_minute, default.finished_last_hour) == (1, 1)
    assert (emails.finished_last_minute, emails.finished_last_hour) == (0, 1)


def test_stats_count_a_row_locked_for_update_by_another_open_transaction(
    app: App, conn: Connection
) -> None:
    held = insert_job(conn, app)
    insert_job(conn, app)
    with psycopg.connect(app.dsn) as holder:
        # Like a claimer between its SELECT … FOR UPDATE and its commit.
        execute(holder, app, "SELECT id FROM {schema}.jobs WHERE id = %s FOR UPDATE", [held])
        skip_locked = select(
            conn, app, "SELECT id FROM {schema}.jobs FOR UPDATE SKIP LOCKED"
        )  # what a SKIP LOCKED count would see
        assert held not in {row[0] for row in skip_locked}

        stats = queue_stats(app, conn)["default"]
        _, listed = app.queries.list_jobs(conn)

        assert stats.pending == stats.due == 2
        assert held in {job.id for job in listed}
        holder.rollback()


def test_stats_count_workers_live_within_the_lease_and_silent_past_it(
    make_app: Callable[..., App],
) -> None:
    app = make_app(lease_timeout=30.0)
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        register(conn, app, pid=1)
        register(conn, app, pid=2, heartbeat_ago=10)
        register(conn, app, pid=3, heartbeat_ago=300)

        stats = app.admin.collect_stats(conn)

    assert (stats.live_workers, stats.silent_workers) == (2, 1)
    assert stats.queues == []
    assert stats.as_json()["workers"] == {"live": 2, "silent": 1, "lease_timeout": 30.0}


# -- listing jobs ---------------------------------------------------------------------------------
def test_list_jobs_filters_by_status_queue_and_task_newest_first_up_to_the_limit(
    app: App, conn: Connection
) -> None:
    first = insert_job(conn, app, task="a")
    second = insert_job(conn, app, task="b", status="failed", finished_ago=1, attempts=3)
    third = insert_job(conn, app, task="a", queue="emails")
    fourth = insert_job(conn, app, task="a", status="failed", finished_ago=1, attempts=3)

    def ids(**filters: Any) -> list[int]:
        return [job.id for job in app.queries.list_jobs(conn, **filters)[1]]

    assert ids() == [fourth, third, second, first]
    assert ids(limit=2) == [fourth, third]
    assert ids(status="failed") == [fourth, second]
    assert ids(queue="emails") == [third]
    assert ids(task_name="a", status="pending") == [third, first]
    assert ids(task_name="a", status="pending", queue="default") == [first]
    assert ids(task_name="missing") == []
    assert app.queries.list_jobs(conn, task_name="missing")[0] is None


# -- retry ----------------------------------------------------------------------------------------
def test_retry_puts_a_failed_job_back_to_pending_due_now_with_one_more_attempt(
    app: App, conn: Connection
) -> None:
    job_id = insert_job(
        conn,
        app,
        status="failed",
        finished_ago=60,
        attempts=3,
        max_attempts=3,
        run_in=-3600,
        locked_by=7,
        last_error="Traceback …\nValueError: boom",
    )

    row = app.queries.retry_job(conn, job_id)

    assert row is not None
    assert (row["retried"], row["previous_status"]) == (True, "failed")
    assert (row["attempts"], row["max_attempts"]) == (3, 4)
    job = app.get_job(job_id).fetch()
    assert job.status is JobStatus.PENDING
    assert (job.attempts, job.max_attempts) == (3, 4)
    assert (job.finished_at, job.locked_by, job.locked_at, job.result) == (None, None, None, None)
    assert job.last_error == "Traceback …\nValueError: boom"
    due = select(conn, app, "SELECT run_at <= now() FROM {schema}.all_jobs WHERE id = %s", [job_id])
    assert due == [(True,)]


def test_retry_of_a_cancelled_job_that_never_ran_keeps_its_attempt_limit_and_clears_the_flag(
    app: App, conn: Connection
) -> None:
    job_id = insert_job(conn, app, status="cancelled", finished_ago=1, max_attempts=5)
    execute(conn, app, "UPDATE {schema}.jobs SET cancel_requested = true WHERE id = %s", [job_id])

    row = app.queries.retry_job(conn, job_id)

    assert row is not None and row["retried"]
    assert (row["attempts"], row["max_attempts"]) == (0, 5)
    flag = select(
        conn, app, "SELECT cancel_requested FROM {schema}.all_jobs WHERE id = %s", [job_id]
    )
    assert flag == [(False,)]


@pytest.mark.parametrize("status", ["pending", "running", "done"])
def test_retry_leaves_a_job_that_is_not_failed_or_cancelled_unchanged(
    app: App, conn: Connection, status: str
) -> None:
    finished_ago = 1.0 if status == "done" else None
    job_id = insert_job(conn, app, status=status, finished_ago=finished_ago, attempts=1)
    before = app.get_job(job_id).fetch()

    row = app.queries.retry_job(conn, job_id)

    assert row is not None
    assert (row["retried"], row["previous_status"]) == (False, status)
    assert app.get_job(job_id).fetch() == before


def test_retry_of_a_missing_job_returns_nothing(app: App, conn: Connection) -> None:
    assert app.queries.retry_job(conn, 424242) is None


def test_retry_failed_jobs_takes_only_failed_jobs_of_the_task_batch_by_batch(
    app: App, conn: Connection
) -> None:
    failed_a = [
        insert_job(conn, app, task="a", status="failed", finished_ago=1, attempts=3)
        for _ in range(3)
    ]
    failed_b = insert_job(conn, app, task="b", status="failed", finished_ago=1, attempts=3)
    cancelled_a = insert_job(conn, app, task="a", status="cancelled", finished_ago=1)
    done_a = insert_job(conn, app, task="a", status="done", finished_ago=1, attempts=1)

    first = app.queries.retry_failed_jobs(conn, task_name="a", limit=2)
    second = app.queries.retry_failed_jobs(conn, task_name="a", limit=2)
    third = app.queries.retry_failed_jobs(conn, task_name="a", limit=2)

    assert [len(first), len(second), len(third)] == [2, 1, 0]
    assert sorted(row["id"] for row in first + second) == failed_a
    statuses = dict(select(conn, app, "SELECT id, status FROM {schema}.all_jobs"))
    assert {statuses[job_id] for job_id in failed_a} == {"pending"}
    assert (statuses[failed_b], statuses[cancelled_a], statuses[done_a]) == (
        "failed",
        "cancelled",
        "done",
    )
    assert [row["id"] for row in app.queries.retry_failed_jobs(conn, task_name=None, limit=10)] == [
        failed_b
    ]


def test_a_retried_job_runs_again_on_a_worker(app: App, conn: Connection) -> None:
    @app.task(name="ops.add")
    def add(a: int, b: int) -> int:
        return a + b

    job_id = insert_job(conn, app, task="ops.add", status="failed", finished_ago=1, attempts=3)
    execute(conn, app, "UPDATE {schema}.jobs SET args = '[2, 3]' WHERE id = %s", [job_id])
    app.queries.retry_job(conn, job_id)

    with running_worker(app):
        wait_until(lambda: app.get_job(job_id).status() is JobStatus.DONE)

    job = app.get_job(job_id).fetch()
    assert (job.result, job.attempts, job.max_attempts) == (5, 4, 4)


# -- workers --------------------------------------------------------------------------------------
def workers_by_id(app: App, conn: Connection, since: float = 3600.0) -> dict[int, WorkerInfo]:
    infos = [
        WorkerInfo.from_row(row, lease_timeout=app.lease_timeout)
        for row in app.queries.list_workers(conn, since=since)
    ]
    return {info.id: info for info in infos}


def test_list_workers_shows_live_silent_stopped_and_lost_workers_with_running_jobs(
    make_app: Callable[..., App],
) -> None:
    app = make_app(lease_timeout=30.0)
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        live = register(conn, app, pid=1)
        silent = register(conn, app, pid=2, heartbeat_ago=120)
        stopped = register(conn, app, pid=3)
        lost = register(conn, app, pid=4, heartbeat_ago=120)
        running = [
            insert_job(conn, app, status="running", locked_by=live, attempts=1) for _ in range(2)
        ]
        orphan = insert_job(conn, app, status="running", locked_by=999_999, attempts=1)
        app.queries.deregister_worker(conn, stopped)
        # A rescuer removes silent registrations; spare `silent` to show it before that.
        execute(
            conn, app, "UPDATE {schema}.workers SET heartbeat_at = now() WHERE id = %s", [silent]
        )
        app.queries.delete_dead_workers(conn, lease_timeout=30.0)
        execute(
            conn,
            app,
            "UPDATE {schema}.workers SET heartbeat_at = now() - interval '2 minutes' WHERE id = %s",
            [silent],
        )

        workers = workers_by_id(app, conn)
        recent_only = workers_by_id(app, conn, since=0.0)

    assert {worker_id: info.state for worker_id, info in workers.items()} == {
        live: "live",
        silent: "silent",
        stopped: "stopped",
        lost: "lost",
        999_999: "unknown",
    }
    assert workers[live].running_job_ids == running
    assert workers[999_999].running_job_ids == [orphan]
    assert workers[lost].removed_at is not None and workers[lost].hostname == "host"
    silent_age = workers[silent].heartbeat_age
    assert silent_age is not None and silent_age >= 120
    assert set(recent_only) == {live, silent, 999_999}


def test_a_worker_whose_row_was_removed_re_registers_and_the_old_id_is_history(
    app: App, conn: Connection
) -> None:
    with running_worker(app) as worker:
        old_id = worker.worker_id
        assert old_id is not None
        execute(conn, app, "DELETE FROM {schema}.workers WHERE id = %s", [old_id])

        wait_until(lambda: worker.worker_id != old_id, message="re-registration")
        workers = workers_by_id(app, conn)

        assert worker.worker_id is not None
        assert workers[worker.worker_id].state == "live"
        assert workers[old_id].state == "stopped"
        assert workers[old_id].removed_at is not None


# -- prune ----------------------------------------------------------------------------------------
def population(conn: Connection, app: App) -> dict[str, int]:
    """One row per case, named for what pruning (done 1 day, failed 7 days) must do."""
    return {
        "done old": insert_job(conn, app, status="done", finished_ago=2 * DAY, attempts=1),
        "done old 2": insert_job(conn, app, status="done", finished_ago=1.5 * DAY, attempts=1),
        "done recent": insert_job(conn, app, status="done", finished_ago=3600, attempts=1),
        "failed old": insert_job(conn, app, status="failed", finished_ago=8 * DAY, attempts=3),
        "failed 2 days": insert_job(conn, app, status="failed", finished_ago=2 * DAY, attempts=3),
        "cancelled old": insert_job(conn, app, status="cancelled", finished_ago=8 * DAY),
        "cancelled recent": insert_job(conn, app, status="cancelled", finished_ago=60),
        # Never pruned whatever their timestamps say.
        "pending old": insert_job(conn, app, run_in=-30 * DAY, finished_ago=30 * DAY),
        "running old": insert_job(
            conn, app, status="running", locked_by=1, attempts=1, finished_ago=30 * DAY
        ),
        "scheduled": insert_job(conn, app, run_in=DAY),
    }


def test_prune_deletes_exactly_the_finished_jobs_past_retention_and_nothing_pending_or_running(
    app: App, conn: Connection
) -> None:
    rows = population(conn, app)

    result = prune(app.queries, conn, done_after=DAY, failed_after=7 * DAY, batch_size=1)

    assert result.deleted == {"done": 2, "failed": 1, "cancelled": 1}
    # One batch per row moved from jobs (rows finished before migration jobs_history) and
    # per row deleted, and an empty one ends each kind.
    assert result.batches >= 3 + 3
    assert job_ids(conn, app) == {
        rows[name]
        for name in (
            "done recent",
            "failed 2 days",
            "cancelled recent",
            "pending old",
            "running old",
            "scheduled",
        )
    }


def test_prune_with_zero_retention_deletes_every_finished_job_and_none_keeps_them(
    app: App, conn: Connection
) -> None:
    rows = population(conn, app)

    result = prune(app.queries, conn, done_after=0.0, failed_after=None)

    assert result.deleted == {"done": 3, "failed": 0, "cancelled": 0}
    remaining = job_ids(conn, app)
    assert not {rows["done old"], rows["done old 2"], rows["done recent"]} & remaining
    assert {rows["failed old"], rows["cancelled old"], rows["pending old"]} <= remaining


def test_prune_skips_a_row_another_transaction_holds_instead_of_waiting(
    app: App, conn: Connection
) -> None:
    held = insert_job(conn, app, status="done", finished_ago=2 * DAY, attempts=1)
    free = insert_job(conn, app, status="done", finished_ago=2 * DAY, attempts=1)
    conn.execute("SET statement_timeout = '5s'")  # a prune that waited would fail, not hang
    with psycopg.connect(app.dsn) as holder:
        execute(holder, app, "SELECT id FROM {schema}.jobs WHERE id = %s FOR UPDATE", [held])

        result = prune(app.queries, conn, done_after=DAY, failed_after=None, batch_size=10)

        assert result.deleted["done"] == 1
        assert job_ids(conn, app) == {held}
        holder.rollback()

    assert prune(app.queries, conn, done_after=DAY, failed_after=None).deleted["done"] == 1
    assert free not in job_ids(conn, app)
    assert job_ids(conn, app) == set()


def test_prune_batches_are_read_through_the_finished_jobs_index(app: App) -> None:
    # Rows are deleted one by one from the default partitions of jobs_history only (days
    # past retention are dropped whole), read by their finished_at index.
    statement = app.queries._statements["prune_history_defaults"]
    params = {"statuses": ["done"], "older_than": DAY, "limit": 100}
    with psycopg.connect(app.dsn, cursor_factory=psycopg.ClientCursor) as conn:
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(row[0] for row in conn.execute(b"EXPLAIN " + statement, params))
        conn.rollback()

    assert "jobs_history_done_default_finished_at_idx" in plan
    assert "Seq Scan on jobs_history" not in plan


def test_prune_forgets_removed_workers_older_than_the_history_retention(
    app: App, conn: Connection
) -> None:
    old = register(conn, app, pid=1)
    recent = register(conn, app, pid=2)
    app.queries.deregister_worker(conn, old)
    app.queries.deregister_worker(conn, recent)
    execute(
        conn,
        app,
        "UPDATE {schema}.worker_history SET removed_at = now() - interval '2 days'"
        " WHERE worker_id = %s",
        [old],
    )

    result = prune(app.queries, conn, done_after=None, failed_after=None, history_after=DAY)

    assert result.worker_history == 1
    history = select(conn, app, "SELECT worker_id FROM {schema}.worker_history")
    assert history == [(recent,)]


def test_prune_refuses_a_connection_inside_a_transaction(app: App) -> None:
    with psycopg.connect(app.dsn) as conn, pytest.raises(ValueError, match="autocommit"):
        prune(app.queries, conn, done_after=DAY, failed_after=None)


# -- the Pruner service ---------------------------------------------------------------------------
def app_pruner(app: App, batch_size: int = 1000) -> Pruner:
    """The Pruner a worker of ``app`` runs (its own connections, the app's retention)."""
    return Pruner(
        "test",
        connector(app.database, owner="test"),
        WorkerSettings.derive(app.settings),
        store=app.queries,
        batch_size=batch_size,
    )


def test_pruner_prunes_with_the_app_retention_options(
    make_app: Callable[..., App],
) -> None:
    app = make_app(prune_done_after=DAY, prune_failed_after=7 * DAY)
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        rows = population(conn, app)
        pruner = app_pruner(app)

        result = pruner.prune(conn)

        assert result is not None
        assert result.deleted == {"done": 2, "failed": 1, "cancelled": 1}
        assert rows["pending old"] in job_ids(conn, app)
        # The lock was released after the pass: another session can take it.
        with psycopg.connect(app.dsn, autocommit=True) as other:
            assert app.queries.lock_pruner(other)


def test_pruner_does_nothing_while_another_session_holds_the_prune_lock(
    app: App, conn: Connection
) -> None:
    rows = population(conn, app)
    pruner = app_pruner(app)
    with psycopg.connect(app.dsn, autocommit=True) as other:
        assert app.queries.lock_pruner(other)
        locks = select(
            conn,
            app,
            # This schema's lock only: other tests' pruners hold their schemas' at times.
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s::oid"
            " AND objid = hashtext(%s)::oid AND granted",
            [ADVISORY_LOCK_CLASS_PRUNE, app.schema],
        )
        assert locks == [(1,)]

        assert pruner.prune(conn) is None
        assert job_ids(conn, app) == set(rows.values())

        assert app.queries.unlock_pruner(other)

    result = pruner.prune(conn)
    assert result is not None and result.total == 4


def test_pruner_with_retention_switched_off_prunes_nothing(
    make_app: Callable[..., App],
) -> None:
    app = make_app(prune_done_after=0, prune_failed_after=None)
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        rows = population(conn, app)

        assert app_pruner(app).prune(conn) is None
        assert job_ids(conn, app) == set(rows.values())


def test_a_running_worker_prunes_on_its_interval(make_app: Callable[..., App]) -> None:
    app = make_app(prune_interval=0.1)
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        old = insert_job(conn, app, status="done", finished_ago=2 * DAY, attempts=1)
        recent = insert_job(conn, app, status="done", finished_ago=60, attempts=1)

        with running_worker(app):
            wait_until(lambda: old not in job_ids(conn, app), message="automatic pruning")

        assert job_ids(conn, app) == {recent}


def test_two_pruners_at_once_take_turns_and_delete_each_row_once(
    app: App, conn: Connection
) -> None:
    for _ in range(40):
        insert_job(conn, app, status="done", finished_ago=2 * DAY, attempts=1)
    results: list[Any] = []
    barrier = threading.Barrier(2)

    def run() -> None:
        pruner = app_pruner(app, batch_size=5)
        with psycopg.connect(app.dsn, autocommit=True) as own:
            barrier.wait()
            results.append(pruner.prune(own))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)

    assert sum(result.total for result in results if result is not None) == 40
    assert job_ids(conn, app) == set()


@pytest.mark.parametrize(
    ("option", "value"),
    [("prune_done_after", -1), ("prune_failed_after", "7d"), ("prune_interval", 0)],
)
def test_app_rejects_an_invalid_pruning_option(option: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=option):
        App("postgresql://localhost/none", **{option: value})


def test_app_pruning_defaults_are_one_day_and_seven_days_every_minute() -> None:
    app = App("postgresql://localhost/none")

    assert (app.prune_done_after, app.prune_failed_after, app.prune_interval) == (
        DAY,
        7 * DAY,
        60.0,
    )
    assert App("postgresql://localhost/none", prune_done_after=0).prune_done_after is None
