"""Finished jobs leave the hot table (migration jobs_history): the finish moves its rows
into jobs_history in one fenced statement, races with cancels and rescues, keys that
outlive their job, workflows whose members finished, and pruning by DROP.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pgtasks import App, JobCancelled, chord
from pgtasks._leases import ClaimRequest, Finish
from pgtasks._worker.pruner import prune
from tests.support.inprocess import execute, running_worker, select


def hot_and_history(conn: psycopg.Connection[Any], app: App, job_id: int) -> tuple[int, int]:
    """How many rows of the job are in jobs, and in jobs_history."""
    hot = select(conn, app, "SELECT count(*) FROM {schema}.jobs WHERE id = %s", [job_id])
    history = select(
        conn, app, "SELECT count(*) FROM {schema}.jobs_history WHERE id = %s", [job_id]
    )
    return int(hot[0][0]), int(history[0][0])


def claim_one(app: App, conn: psycopg.Connection[Any]) -> tuple[int, int, int]:
    """Register a worker and claim one job for it: (worker id, job id, attempt)."""
    worker_id = app.queries.register_worker(
        conn, hostname="test", pid=1, queues=None, concurrency=1
    )
    claimed = app.queries.claim_jobs(conn, ClaimRequest(worker_id=worker_id, limit=1))
    conn.commit()
    assert len(claimed) == 1
    return worker_id, claimed[0].id, claimed[0].attempt


@pytest.fixture
def conn(app: App) -> Any:
    with psycopg.connect(app.dsn) as connection:
        yield connection


def test_a_finish_moves_the_row_into_history_and_get_reads_it_there(app: App) -> None:
    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    handle = add.delay(2, 3)
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        app.queries.prepare_history_days(conn)  # as migrate and the pruner do
    with running_worker(app):
        assert handle.get(timeout=20) == 5
    with psycopg.connect(app.dsn) as conn:
        assert hot_and_history(conn, app, handle.id) == (0, 1)
        partition = select(
            conn,
            app,
            "SELECT tableoid::regclass::text FROM {schema}.jobs_history WHERE id = %s",
            [handle.id],
        )[0][0]
    # Today's partition of the done class, created by migrate.
    assert partition.rsplit(".", 1)[-1].startswith("jobs_history_done_p")
    assert handle.status() == "done"
    assert handle.refresh().row.result == 5
    assert app.get_job(handle.id).get(timeout=1) == 5
    _, listed = app.queries.list_jobs(conn := psycopg.connect(app.dsn))
    conn.close()
    assert handle.id in {job.id for job in listed}


def test_a_lost_lease_matches_nothing_and_moves_nothing(app: App, conn: Any) -> None:
    @app.task
    def work() -> None: ...

    handle = work.delay()
    worker_id, job_id, attempt = claim_one(app, conn)
    # The lease moves on (a rescue and a new claim): the old owner's finish is refused.
    execute(conn, app, "UPDATE {schema}.jobs SET attempts = attempts + 1 WHERE id = %s", [job_id])
    conn.commit()
    written = app.queries.finish_jobs(conn, [Finish(job_id, worker_id, attempt, "done", "1")])
    conn.commit()
    assert written == {}
    assert hot_and_history(conn, app, handle.id) == (1, 0)
    assert handle.status() == "running"


def test_a_retry_outcome_stays_in_jobs_and_a_failure_moves(app: App, conn: Any) -> None:
    @app.task(max_attempts=2)
    def flaky() -> None: ...

    handle = flaky.delay()
    worker_id, job_id, attempt = claim_one(app, conn)
    retry = Finish(job_id, worker_id, attempt, "pending", error="E: once", delay=0.0)
    assert app.queries.finish_jobs(conn, [retry]) == {job_id: "pending"}
    conn.commit()
    assert hot_and_history(conn, app, job_id) == (1, 0)
    _, job_id, attempt = claim_one(app, conn)
    failed = Finish(job_id, worker_id, attempt, "failed", error="E: twice", exception_type="E")
    written = app.queries.finish_jobs(conn, [failed])
    conn.commit()
    # The claim registered another worker: the first one's lease no longer matches.
    assert written == {}
    row = select(conn, app, "SELECT locked_by FROM {schema}.jobs WHERE id = %s", [job_id])
    owner = row[0][0]
    written = app.queries.finish_jobs(
        conn, [Finish(job_id, owner, attempt, "failed", error="E: 2")]
    )
    conn.commit()
    assert written == {job_id: "failed"}
    assert hot_and_history(conn, app, job_id) == (0, 1)
    errors = select(
        conn, app, "SELECT attempt_errors FROM {schema}.all_jobs WHERE id = %s", [handle.id]
    )[0][0]
    assert [entry["attempt"] for entry in errors] == [1, 2]


def test_a_cancel_racing_the_finish_waits_then_finds_the_job_finished(app: App, conn: Any) -> None:
    @app.task
    def work() -> None: ...

    handle = work.delay()
    worker_id, job_id, attempt = claim_one(app, conn)
    # The finish holds the row (uncommitted) while the cancel waits for it.
    app.queries.finish_jobs(conn, [Finish(job_id, worker_id, attempt, "done", "7")])
    outcome: list[str] = []
    cancelling = threading.Thread(target=lambda: outcome.append(handle.cancel().outcome))
    cancelling.start()
    with psycopg.connect(app.dsn, autocommit=True) as probe:
        from tests.support.waiting import wait_until

        wait_until(
            lambda: bool(
                probe.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE '%%cancel%%'"
                ).fetchall()
            ),
            message="the cancel to wait for the finish's row lock",
        )
    conn.commit()
    cancelling.join(20)
    assert outcome == ["already_finished"]
    assert handle.status() == "done"
    assert hot_and_history(conn, app, job_id) == (0, 1)


def test_a_cancel_before_the_finish_ends_the_job_cancelled_in_history(app: App, conn: Any) -> None:
    @app.task
    def work() -> None: ...

    handle = work.delay()
    worker_id, job_id, attempt = claim_one(app, conn)
    assert handle.cancel().outcome == "requested"
    written = app.queries.finish_jobs(conn, [Finish(job_id, worker_id, attempt, "done", "1")])
    conn.commit()
    assert written == {job_id: "cancelled"}
    assert hot_and_history(conn, app, job_id) == (0, 1)
    with pytest.raises(JobCancelled):
        handle.get(timeout=1)
    pending = work.delay()
    assert pending.cancel().outcome == "cancelled"  # moved by the trigger
    assert hot_and_history(conn, app, pending.id) == (0, 1)


def test_a_rescue_moves_a_job_out_of_attempts_and_a_late_finish_matches_nothing(
    app: App, conn: Any
) -> None:
    @app.task(max_attempts=1)
    def work() -> None: ...

    handle = work.delay()
    worker_id, job_id, attempt = claim_one(app, conn)
    execute(conn, app, "DELETE FROM {schema}.workers WHERE id = %s", [worker_id])
    conn.commit()
    rescued = app.queries.rescue_jobs(conn, lease_timeout=30.0)
    conn.commit()
    assert [(row["id"], row["status"]) for row in rescued] == [(job_id, "failed")]
    assert hot_and_history(conn, app, job_id) == (0, 1)
    late = app.queries.finish_jobs(conn, [Finish(job_id, worker_id, attempt, "done", "1")])
    conn.commit()
    assert late == {}
    assert handle.status() == "failed"
    assert hot_and_history(conn, app, job_id) == (0, 1)


def test_an_idempotency_key_outlives_the_move_and_a_retry_brings_the_job_back(
    app: App, conn: Any
) -> None:
    @app.task
    def once(n: int) -> int:
        if n < 0:
            raise ValueError("negative")
        return n

    first = once.apply_async((1,), idempotency_key="k-1")
    failing = once.apply_async((-1,), idempotency_key="k-2")
    with running_worker(app):
        assert first.get(timeout=20) == 1
        with pytest.raises(Exception, match="negative"):
            failing.get(timeout=20)
    assert hot_and_history(conn, app, first.id) == (0, 1)
    again = once.apply_async((1,), idempotency_key="k-1")
    assert (again.id, again.existed) == (first.id, True)
    assert select(conn, app, "SELECT count(*) FROM {schema}.all_jobs")[0][0] == 2
    # Retried: back in jobs under its key; enqueuing the key still answers with it.
    assert app.admin.retry_job(failing.id).retried
    assert hot_and_history(conn, app, failing.id) == (1, 0)
    assert once.apply_async((-1,), idempotency_key="k-2").id == failing.id


def test_a_unique_for_window_outlives_the_move(app: App, conn: Any) -> None:
    @app.task(unique_for=timedelta(hours=1), unique_key=lambda day: day)
    def report(day: str) -> str:
        return day

    first = report.delay("mon")
    with running_worker(app):
        assert first.get(timeout=20) == "mon"
    assert hot_and_history(conn, app, first.id) == (0, 1)
    again = report.delay("mon")
    assert (again.id, again.existed) == (first.id, True)
    assert select(conn, app, "SELECT count(*) FROM {schema}.all_jobs")[0][0] == 1


def test_a_chord_reads_its_members_results_from_history(app: App) -> None:
    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    @app.task
    def total(values: list[int]) -> int:
        return sum(values)

    workflow = chord([add.s(1, 1), add.s(2, 2), add.s(3, 3)], total.s()).delay()
    with running_worker(app):
        assert workflow.get(timeout=30) == 12
    with psycopg.connect(app.dsn) as conn:
        rows = select(
            conn,
            app,
            "SELECT count(*) FROM {schema}.jobs_history WHERE workflow_id = %s",
            [workflow.id],
        )
        assert rows[0][0] == 4
        assert select(conn, app, "SELECT count(*) FROM {schema}.jobs")[0][0] == 0
    assert app.get_workflow(workflow.id)["status"] == "done"


def test_prune_drops_expired_days_and_leaves_no_dead_tuple_in_jobs(app: App, conn: Any) -> None:
    conn.autocommit = True
    # Three days back: a day partition of each class, filled as finishes would.
    names = select(
        conn,
        app,
        "SELECT * FROM {schema}.jobs_history_create_days(now() - interval '3 days', 0)",
    )
    names += select(
        conn,
        app,
        "SELECT * FROM {schema}.jobs_history_create_days(now() - interval '3 days', 0)",
    )
    assert len(names) == 2
    execute(
        conn,
        app,
        "INSERT INTO {schema}.jobs_history (id, task_name, queue, args, kwargs, status,"
        " attempts, max_attempts, finished_at, idempotency_key)"
        " SELECT -i, 't', 'q', '[]', '{{}}', CASE WHEN i % 4 = 0 THEN 'failed' ELSE 'done' END,"
        " 1, 1, date_trunc('day', now() - interval '3 days') + interval '1 hour',"
        " CASE WHEN i = 1 THEN 'old-key' END"
        " FROM generate_series(1, 400) AS i",
    )
    execute(
        conn,
        app,
        "INSERT INTO {schema}.job_keys (job_id, idempotency_key) VALUES (-1, 'old-key')",
    )
    result = prune(app.queries, conn, done_after=86400.0, failed_after=7 * 86400.0)
    assert result.days_dropped == 1
    assert result.deleted["done"] == 300
    assert select(conn, app, "SELECT count(*) FROM {schema}.jobs_history")[0][0] == 100
    assert select(conn, app, "SELECT count(*) FROM {schema}.job_keys")[0][0] == 0
    result = prune(app.queries, conn, done_after=86400.0, failed_after=86400.0)
    assert (result.days_dropped, result.deleted["failed"]) == (1, 100)
    stats = select(
        conn,
        app,
        "SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = %s AND relname = 'jobs'",
        [app.schema],
    )
    assert stats == [(0,)]


def test_a_day_holding_an_unfinished_workflow_keeps_its_rows(app: App, conn: Any) -> None:
    conn.autocommit = True
    select(
        conn, app, "SELECT * FROM {schema}.jobs_history_create_days(now() - interval '3 days', 0)"
    )
    workflow_id = select(
        conn, app, "INSERT INTO {schema}.workflows (kind) VALUES ('chain') RETURNING id"
    )[0][0]
    execute(
        conn,
        app,
        "INSERT INTO {schema}.jobs (task_name, queue, args, kwargs, max_attempts, status,"
        " workflow_id) VALUES ('t', 'q', '[]', '{{}}', 1, 'waiting', %s)",
        [workflow_id],
    )
    execute(
        conn,
        app,
        "INSERT INTO {schema}.jobs_history (id, task_name, queue, args, kwargs, status,"
        " attempts, max_attempts, finished_at, workflow_id, result)"
        " SELECT -i, 't', 'q', '[]', '{{}}', 'done', 1, 1,"
        " date_trunc('day', now() - interval '3 days') + interval '1 hour',"
        " CASE WHEN i = 1 THEN %s END, to_jsonb(i) FROM generate_series(1, 10) AS i",
        [workflow_id],
    )
    result = prune(app.queries, conn, done_after=86400.0, failed_after=None)
    assert (result.days_dropped, result.deleted["done"]) == (1, 9)
    kept = select(conn, app, "SELECT id, result FROM {schema}.all_jobs WHERE id < 0")
    assert kept == [(-1, 1)]


def test_a_purged_job_frees_its_key(app: App, conn: Any) -> None:
    @app.task
    def once() -> None: ...

    first = once.apply_async(idempotency_key="purged")
    count = app.queries.count_purgeable_jobs(conn, queue=None, task_name=None)
    purged = app.queries.purge_jobs(
        conn, queue=None, task_name=None, max_id=count["max_id"], limit=100
    )
    conn.commit()
    assert [row["id"] for row in purged] == [first.id]
    again = once.apply_async(idempotency_key="purged")
    assert (again.existed, again.id != first.id) == (False, True)


def test_a_job_deleted_by_hand_frees_its_key_when_its_transaction_commits(
    app: App, conn: Any
) -> None:
    """A key is taken as long as its job exists: a row deleted outright (from jobs or from
    jobs_history) frees it at commit, and the next enqueue of the key makes a new job."""

    @app.task
    def once(n: int) -> int:
        return n

    pending = once.apply_async((1,), idempotency_key="by-hand-pending", countdown=3600)
    finished = once.apply_async((2,), idempotency_key="by-hand-finished")
    with running_worker(app):
        assert finished.get(timeout=20) == 2
    assert hot_and_history(conn, app, finished.id) == (0, 1)
    pending_but_late = once.apply_async((3,), idempotency_key="by-hand-pending")
    assert pending_but_late.id == pending.id
    execute(conn, app, "DELETE FROM {schema}.jobs WHERE id = %s", [pending.id])
    execute(conn, app, "DELETE FROM {schema}.jobs_history WHERE id = %s", [finished.id])
    # Until the deletes commit, the keys stay taken.
    assert select(conn, app, "SELECT count(*) FROM {schema}.job_keys")[0][0] == 2
    conn.commit()

    assert select(conn, app, "SELECT count(*) FROM {schema}.job_keys")[0][0] == 0
    again = once.apply_async((1,), idempotency_key="by-hand-pending")
    assert (again.existed, again.id != pending.id) == (False, True)
    assert once.apply_async((2,), idempotency_key="by-hand-finished").existed is False


def test_a_job_that_moves_keeps_its_key(app: App, conn: Any) -> None:
    """Cancelled (moved by the trigger), retried (moved back), and moved out of a default
    partition into the day partition made for it: the key stays with the job."""

    @app.task
    def once() -> None: ...

    cancelled = once.apply_async(idempotency_key="moves-cancelled", countdown=3600)
    later = once.apply_async(idempotency_key="moves-later", countdown=3600)
    assert app.cancel(cancelled.id).outcome == "cancelled"
    assert hot_and_history(conn, app, cancelled.id) == (0, 1)
    assert app.admin.retry_job(cancelled.id).retried
    assert hot_and_history(conn, app, cancelled.id) == (1, 0)
    # Finished five days ahead: no partition holds that day yet, so the default one does,
    # until the day's partition is made (its rows move into it).
    execute(
        conn,
        app,
        "UPDATE {schema}.jobs SET status = 'done', finished_at = now() + interval '5 days'"
        " WHERE id = %s",
        [later.id],
    )
    conn.commit()
    where = "SELECT tableoid::regclass::text FROM {schema}.jobs_history WHERE id = %s"
    assert select(conn, app, where, [later.id])[0][0].endswith("jobs_history_done_default")
    made = select(
        conn,
        app,
        "SELECT {schema}.jobs_history_create_days(now() + interval '5 days', 0)",
    )
    conn.commit()

    assert made and select(conn, app, where, [later.id])[0][0].endswith(made[0][0])
    for handle, key in ((cancelled, "moves-cancelled"), (later, "moves-later")):
        again = once.apply_async(idempotency_key=key)
        assert (again.id, again.existed) == (handle.id, True)
    assert select(conn, app, "SELECT count(*) FROM {schema}.job_keys")[0][0] == 2


def test_failed_and_cancelled_workflows_are_found_from_their_jobs_in_history(
    app: App, conn: Any
) -> None:
    """``workflows list --status failed|cancelled`` finds its workflows from their jobs of
    that status (list_ended_workflows), not by probing every workflow: the same workflows,
    in the same order and pages, as the state of each workflow says."""
    from pgtasks import chain
    from pgtasks._app.workflow_admin import list_workflows

    @app.task(name="steps.add")
    def add(a: int, b: int = 0) -> int:
        return a + b

    conn.autocommit = True
    flows = [chain(add.s(n), add.s(), add.s()).delay().id for n in range(8)]

    def end(workflow_id: int, step: str, status: str) -> None:
        execute(
            conn,
            app,
            "UPDATE {schema}.jobs SET status = %s, finished_at = now(), locked_by = NULL"
            " WHERE workflow_id = %s AND workflow_step = %s",
            [status, workflow_id, step],
        )

    app.cancel_workflow(flows[0])  # cancelled
    end(flows[1], "0", "failed")  # failed (the rest cancelled downstream)
    end(flows[2], "0", "cancelled")  # cancelled by its first step
    end(flows[3], "1", "cancelled")  # its first step still pending: running
    end(flows[4], "1", "failed")  # failed, and its first step pending: running
    app.cancel_workflow(flows[5])  # cancelled
    end(flows[6], "2", "failed")  # failed, the others still pending: running
    end(flows[6], "0", "cancelled")
    end(flows[6], "1", "cancelled")  # now failed and cancelled jobs: failed
    states = {flow: list_workflows(app, workflow_id=flow, limit=1)[0].state for flow in flows}
    assert states[flows[3]] == states[flows[4]] == "running"
    assert states[flows[6]] == "failed" and states[flows[7]] == "running"
    for status in ("failed", "cancelled"):
        expected = sorted((flow for flow in flows if states[flow] == status), reverse=True)
        assert len(expected) >= 2, status
        found = list_workflows(app, status=status)
        assert [summary.id for summary in found] == expected, status
        assert {summary.state for summary in found} == {status}
        assert all(summary.steps == 3 and summary.finished_at for summary in found)
        assert [s.id for s in list_workflows(app, status=status, limit=1)] == expected[:1]
        paged = list_workflows(app, status=status, before=expected[0])
        assert [summary.id for summary in paged] == expected[1:]
