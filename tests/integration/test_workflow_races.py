"""A chord's callback starts exactly once, with every member's result, when its last
members finish at the same instant on different connections (workers)."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from pgtasks import App, chord
from tests.support.inprocess import select

CHORDS = 200


@pytest.fixture
def pair(app: App) -> Any:
    @app.task(name="member")
    def member(value: int) -> int:
        return value

    @app.task(name="callback")
    def callback(values: list[int]) -> int:
        return sum(values)

    return member, callback


def claim_all(app: App, dsn: str, worker_id: int) -> dict[int, int]:
    """Claim every due job as ``worker_id``: their attempt numbers by id."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = app.store.claim_jobs(conn, worker_id=worker_id, queues=None, limit=10_000)
    return {row["id"]: row["attempts"] for row in rows}


def finish(app: App, conn: psycopg.Connection[Any], job_id: int, attempt: int, value: int) -> None:
    written = app.store.finish_jobs(
        conn, worker_id=1, outcomes=[(job_id, attempt, "done", str(value), None, 0.0)]
    )
    assert written == {job_id: "done"}


def callbacks(admin: psycopg.Connection[Any], app: App) -> list[tuple[Any, ...]]:
    return select(
        admin,
        app,
        "SELECT status, args, waiting_for FROM {schema}.jobs"
        " WHERE task_name = 'callback' ORDER BY id",
    )


def test_two_members_finishing_at_once_start_the_callback_once(
    app: App, dsn: str, admin: psycopg.Connection[Any], pair: Any
) -> None:
    member, callback = pair
    workflows = [
        chord([member.s(2 * n), member.s(2 * n + 1)], callback.s()).delay() for n in range(CHORDS)
    ]
    leases = claim_all(app, dsn, worker_id=1)
    assert len(leases) == 2 * CHORDS  # the callbacks are waiting: never claimed
    member_ids = [
        sorted(
            job["id"]
            for job in app.get_workflow(workflow.id)["jobs"]
            if job["task_name"] == "member"
        )
        for workflow in workflows
    ]
    barrier = threading.Barrier(2)
    failures: list[BaseException] = []

    def finisher(side: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                for n, ids in enumerate(member_ids):
                    barrier.wait(timeout=30)
                    finish(app, conn, ids[side], leases[ids[side]], 2 * n + side)
        except BaseException as error:
            failures.append(error)
            barrier.abort()

    threads = [threading.Thread(target=finisher, args=(side,)) for side in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures, failures
    rows = callbacks(admin, app)
    assert len(rows) == CHORDS
    for n, (status, args, waiting_for) in enumerate(rows):
        assert (status, waiting_for) == ("pending", 0), (n, status, waiting_for)
        assert args == [[2 * n, 2 * n + 1]], (n, args)
    # Each callback is claimable once: exactly CHORDS of them now.
    assert len(claim_all(app, dsn, worker_id=2)) == CHORDS


def test_the_second_finisher_waits_for_the_first_and_sees_its_result(
    app: App, dsn: str, admin: psycopg.Connection[Any], pair: Any
) -> None:
    member, callback = pair
    chord([member.s(1), member.s(2)], callback.s()).delay()
    leases = claim_all(app, dsn, worker_id=1)
    first, second = sorted(leases)
    with psycopg.connect(dsn) as holder, psycopg.connect(dsn, autocommit=True) as other:
        finish(app, holder, first, leases[first], 10)  # not committed: holds the lock
        done = threading.Event()

        def finish_second() -> None:
            finish(app, other, second, leases[second], 20)
            done.set()

        thread = threading.Thread(target=finish_second)
        thread.start()
        assert not done.wait(0.5)  # waits for the callback's row lock
        assert callbacks(admin, app)[0][0] == "waiting"
        holder.commit()
        thread.join(10)
        assert done.is_set()
    assert callbacks(admin, app) == [("pending", [[10, 20]], 0)]
