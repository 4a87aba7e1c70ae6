"""The workflows' triggers on jobs_history run only for workflow jobs (migration 0030), and
the sequences' statement trigger only for sequence jobs (migration 0032): a finish, a
failure or a cancel of a plain job calls none of them, while a workflow step's finish
still moves its workflow on and a sequence head's finish hands its key's turn over.
Calls are counted by the server (track_functions, pg_stat_xact_user_functions) in the
transaction that finished the jobs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import pytest

from pgtasks import App, chain
from pgtasks._leases import ClaimedJob, ClaimRequest, Finish
from pgtasks._retry import Outcome
from tests.support.inprocess import execute, select

WORKFLOW_FUNCTIONS = ("workflow_job_ended", "workflow_jobs_ended")
SEQUENCE_FUNCTIONS = ("sequence_job_ending", "sequence_job_ended", "sequence_jobs_ended")


def _claim(app: App, limit: int) -> list[ClaimedJob]:
    with app.connection() as conn:
        worker_id = app.queries.register_worker(
            conn, hostname="h", pid=1, queues=None, concurrency=limit
        )
        return list(
            app.queries.finish_and_claim_jobs(conn, (), ClaimRequest(worker_id, limit)).claimed
        )


def _counting_calls(
    app: App,
    work: Callable[[psycopg.Connection[Any]], object],
    functions: Sequence[str] = WORKFLOW_FUNCTIONS,
) -> dict[str, int]:
    """Run ``work`` in one transaction with function calls counted; the calls of
    ``functions`` in it (absent: never called). The counts are read before and after
    ``work`` in that transaction (the backend's counts not yet reported include earlier
    transactions' calls)."""
    with app.connection() as conn, conn.transaction():
        try:
            conn.execute("SET LOCAL track_functions = 'pl'")
        except psycopg.errors.InsufficientPrivilege:
            pytest.skip("track_functions needs a superuser on the test server")
        before = _calls(conn, app, functions)
        work(conn)
        after = _calls(conn, app, functions)
    calls = {name: after.get(name, 0) - before.get(name, 0) for name in functions}
    return {name: count for name, count in calls.items() if count}


def _calls(conn: psycopg.Connection[Any], app: App, functions: Sequence[str]) -> dict[str, int]:
    rows = conn.execute(
        "SELECT funcname::text, calls FROM pg_stat_xact_user_functions"
        " WHERE schemaname = %s AND funcname = ANY(%s)",
        (app.schema, list(functions)),
    ).fetchall()
    return dict(rows)


def _finish(jobs: Sequence[ClaimedJob], outcome: Outcome, app: App) -> Callable[..., object]:
    def work(conn: psycopg.Connection[Any]) -> object:
        written = app.queries.finish_jobs(conn, [Finish.of(job, outcome) for job in jobs])
        assert len(written) == len(jobs)
        return written

    return work


@pytest.fixture
def noop(app: App) -> Any:
    @app.task(name="noop", max_attempts=1)
    def noop(*args: Any) -> None:
        """Does nothing."""

    return noop


def test_finishing_plain_jobs_runs_no_workflow_trigger(app: App, noop: Any) -> None:
    noop.delay_many([{}] * 5)
    jobs = _claim(app, 5)
    assert _counting_calls(app, _finish(jobs[:3], Outcome.done("null"), app)) == {}
    failure = Outcome.failed("RuntimeError: boom", exception_type="RuntimeError")
    assert _counting_calls(app, _finish(jobs[3:], failure, app)) == {}
    with app.connection() as conn:
        rows = select(conn, app, "SELECT status, count(*) FROM {schema}.jobs_history GROUP BY 1")
    assert dict(rows) == {"done": 3, "failed": 2}


def test_cancelling_a_plain_job_runs_no_workflow_trigger(app: App, noop: Any) -> None:
    job = noop.delay()

    def cancel(conn: psycopg.Connection[Any]) -> object:
        # An UPDATE that ends a job: the row trigger of jobs moves it into jobs_history.
        return execute(
            conn, app, "UPDATE {schema}.jobs SET status = 'cancelled' WHERE id = %s", [job.id]
        )

    assert _counting_calls(app, cancel) == {}
    with app.connection() as conn:
        rows = select(conn, app, "SELECT status FROM {schema}.jobs_history WHERE id = %s", [job.id])
    assert rows == [("cancelled",)]


def test_finishing_a_workflow_step_still_moves_the_workflow_on(app: App, noop: Any) -> None:
    workflow = chain(noop.s(), noop.s()).apply_async()
    (first,) = _claim(app, 5)
    calls = _counting_calls(app, _finish([first], Outcome.done("null"), app))
    assert calls == {"workflow_job_ended": 1, "workflow_jobs_ended": 1}
    with app.connection() as conn:
        rows = select(
            conn,
            app,
            "SELECT id, status FROM {schema}.all_jobs WHERE workflow_id = %s ORDER BY id",
            [workflow.id],
        )
    assert [status for _, status in rows] == ["done", "pending"]
    (second,) = _claim(app, 5)
    assert second.id == rows[1][0]
    # The last step has nothing after it: noted by no one, so no statement trigger.
    assert _counting_calls(app, _finish([second], Outcome.done("null"), app)) == {
        "workflow_job_ended": 1
    }


def test_finishing_and_cancelling_plain_jobs_runs_no_sequence_trigger(app: App, noop: Any) -> None:
    noop.delay_many([{}] * 3)
    jobs = _claim(app, 3)
    calls = _counting_calls(app, _finish(jobs[:2], Outcome.done("null"), app), SEQUENCE_FUNCTIONS)
    assert calls == {}
    cancelled = noop.delay()

    def cancel(conn: psycopg.Connection[Any]) -> object:
        return execute(
            conn, app, "UPDATE {schema}.jobs SET status = 'cancelled' WHERE id = %s", [cancelled.id]
        )

    assert _counting_calls(app, cancel, SEQUENCE_FUNCTIONS) == {}


def test_a_sequence_heads_finish_hands_the_turn_over_and_a_later_plain_finish_runs_nothing(
    app: App, noop: Any
) -> None:
    @app.task(name="step", sequence_key="s", max_attempts=1)
    def step(n: int) -> None:
        """One step of sequence s."""

    step.delay(1)
    second = step.delay(2)
    noop.delay()
    claimed = _claim(app, 5)  # the head of s and the plain job: s's second job waits
    head = next(job for job in claimed if job.task_name == "step")
    plain = next(job for job in claimed if job.task_name == "noop")

    def finish_both(conn: psycopg.Connection[Any]) -> object:
        app.queries.finish_jobs(conn, [Finish.of(head, Outcome.done("null"))])
        return app.queries.finish_jobs(conn, [Finish.of(plain, Outcome.done("null"))])

    calls = _counting_calls(app, finish_both, SEQUENCE_FUNCTIONS)
    # The head's statement: its BEFORE row trigger notes the key (a done job runs no
    # AFTER row trigger: migration sequence_handed_with_claim) and the statement trigger
    # hands the turn over; the plain job's statement after it, in the same transaction,
    # calls none (the statement trigger cleared the flag).
    assert calls == {"sequence_job_ending": 1, "sequence_jobs_ended": 1}
    with app.connection() as conn:
        rows = select(conn, app, "SELECT status FROM {schema}.jobs WHERE id = %s", [second.id])
    assert rows == [("pending",)]


def test_a_failed_sequence_head_still_runs_the_row_trigger_that_holds_its_sequence(
    app: App,
) -> None:
    @app.task(name="step", sequence_key="s", max_attempts=1)
    def step(n: int) -> None:
        """One step of sequence s."""

    step.delay(1)
    second = step.delay(2)
    (head,) = _claim(app, 5)

    def fail(conn: psycopg.Connection[Any]) -> object:
        return app.queries.finish_jobs(conn, [Finish.of(head, Outcome.failed("boom"))])

    calls = _counting_calls(app, fail, SEQUENCE_FUNCTIONS)
    assert calls == {"sequence_job_ending": 1, "sequence_job_ended": 1, "sequence_jobs_ended": 1}
    with app.connection() as conn:
        held = select(conn, app, "SELECT job_id FROM {schema}.sequence_holds", [])
        rows = select(conn, app, "SELECT status FROM {schema}.jobs WHERE id = %s", [second.id])
    assert held == [(head.id,)]
    assert rows == [("waiting",)]
