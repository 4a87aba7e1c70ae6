"""A chord's callback starts exactly once, with every member's result, when its last
members finish at the same instant on different connections (workers)."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from pgtasks import App, chord
from pgtasks._leases import ClaimRequest, Finish
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
        jobs = app.queries.claim_jobs(conn, ClaimRequest(worker_id, limit=10_000))
    return {job.id: job.attempt for job in jobs}


def returned(job_id: int, worker_id: int, attempt: int, value: int) -> Finish:
    """The finish of a job that returned ``value``."""
    return Finish(job_id, worker_id, attempt, "done", result_json=str(value))


def finish(app: App, conn: psycopg.Connection[Any], job_id: int, attempt: int, value: int) -> None:
    written = app.queries.finish_jobs(conn, [returned(job_id, 1, attempt, value)])
    assert written == {job_id: "done"}


def callbacks(admin: psycopg.Connection[Any], app: App) -> list[tuple[Any, ...]]:
    return select(
        admin,
        app,
        "SELECT status, args, waiting_for FROM {schema}.all_jobs"
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


# -- the nested chord: chord([a1, chord([b1, b2], cy), a3], cx) ----------------------------
NESTED = 200
#: The role of each job of the nested chord, by step.
ROLES = {"0.0": "a1", "0.1.0.0": "b1", "0.1.0.1": "b2", "0.1.1": "cy", "0.2": "a3", "1": "cx"}


def nested_chord(member: Any, callback: Any, n: int) -> Any:
    """chord([a1, chord([b1, b2], cy), a3], cx); member values 10n+1 … 10n+4. The odd
    races' cy runs on queue "inner", so that the race can claim it alone."""
    inner = callback.s().set(queue="inner") if n % 2 else callback.s()
    return chord(
        [
            member.s(10 * n + 1),
            chord([member.s(10 * n + 2), member.s(10 * n + 3)], inner),
            member.s(10 * n + 4),
        ],
        callback.s(),
    )


def by_role(app: App, workflow_id: int) -> dict[str, int]:
    return {ROLES[job["workflow_step"]]: job["id"] for job in app.get_workflow(workflow_id)["jobs"]}


def finish_many(
    app: App, conn: psycopg.Connection[Any], outcomes: list[tuple[int, int, int]]
) -> None:
    """One fenced finish statement for ``(job id, attempt, value)`` outcomes. A
    serialization failure (REPEATABLE READ) is written again, as a worker does."""
    finishes = [returned(job_id, 1, attempt, value) for job_id, attempt, value in outcomes]
    for _ in range(100):
        try:
            written = app.queries.finish_jobs(conn, finishes)
        except psycopg.errors.SerializationFailure:
            continue
        assert written == {job_id: "done" for job_id, _, _ in outcomes}
        return
    raise AssertionError("100 serialization failures in a row")


def run_races(app: App, dsn: str, pair: Any, isolation: str | None) -> list[dict[str, int]]:
    """Finish the members of NESTED nested chords from two connections at the same instant,
    in orders that reach the two callbacks in opposite orders when each finished member
    locks its own successors first (as migration 0011 did):

    - even races: side 0 finishes (a1, b1), side 1 (b2, a3), one statement each: a1
      leads side 0 to cx, then b1 to cy; b2 leads side 1 to cy, then a3 to cx. The last
      of b1, b2 starts cy (left pending here);
    - odd races: side 0 (a1, b1), side 1 b2: the last starts cy; then side 0 finishes cy
      while side 1 finishes a3: the last of them starts cx.
    """
    member, callback = pair
    roles = [by_role(app, nested_chord(member, callback, n).delay().id) for n in range(NESTED)]
    leases = claim_all(app, dsn, worker_id=1)
    assert len(leases) == 4 * NESTED  # a1, b1, b2, a3 of each
    barrier = threading.Barrier(2)
    failures: list[BaseException] = []
    # libpq options: a space inside a value is escaped with a backslash.
    options = (
        "-c default_transaction_isolation=" + isolation.replace(" ", "\\ ") if isolation else ""
    )

    def finisher(side: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True, options=options) as conn:
                for n, ids in enumerate(roles):

                    def done(
                        *names: str, ids: dict[str, int] = ids, n: int = n
                    ) -> list[tuple[int, int, int]]:
                        offsets = {"a1": 1, "b1": 2, "b2": 3, "a3": 4}
                        return [
                            (ids[name], leases[ids[name]], 10 * n + offsets[name]) for name in names
                        ]

                    barrier.wait(timeout=30)
                    if side == 0:
                        finish_many(app, conn, done("a1", "b1"))
                    else:
                        finish_many(app, conn, done("b2", "a3") if n % 2 == 0 else done("b2"))
                    if n % 2 == 0:
                        continue
                    barrier.wait(timeout=30)
                    if side == 0:  # cy is pending now: claim it
                        claim = ClaimRequest(1, limit=9, queues=("inner",))
                        jobs = app.queries.claim_jobs(conn, claim)
                        assert [job.id for job in jobs] == [ids["cy"]], jobs
                        leases[ids["cy"]] = jobs[0].attempt
                    barrier.wait(timeout=30)
                    if side == 0:
                        finish_many(app, conn, [(ids["cy"], leases[ids["cy"]], -n)])
                    else:
                        finish_many(app, conn, done("a3"))
        except BaseException as error:
            failures.append(error)
            barrier.abort()

    threads = [threading.Thread(target=finisher, args=(side,)) for side in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not failures, failures
    return roles


def callback_rows(admin: psycopg.Connection[Any], app: App) -> dict[int, tuple[Any, ...]]:
    rows = select(
        admin,
        app,
        "SELECT id, status, args, waiting_for FROM {schema}.all_jobs WHERE task_name = 'callback'",
    )
    return {row[0]: tuple(row[1:]) for row in rows}


@pytest.mark.parametrize("isolation", [None, "repeatable read"])
def test_nested_chords_finishing_in_opposite_orders_start_each_callback_once(
    app: App, dsn: str, admin: psycopg.Connection[Any], pair: Any, isolation: str | None
) -> None:
    roles = run_races(app, dsn, pair, isolation)
    rows = callback_rows(admin, app)
    even = [ids for n, ids in enumerate(roles) if n % 2 == 0]
    for n, ids in enumerate(roles):
        if n % 2 == 0:  # cy started with b1, b2; cx waits for cy alone
            assert rows[ids["cy"]] == ("pending", [[10 * n + 2, 10 * n + 3]], 0), n
            assert rows[ids["cx"]] == ("waiting", None, 1) or rows[ids["cx"]][:2] == (
                "waiting",
                [],
            ), (n, rows[ids["cx"]])
        else:  # cy done (claimed and finished), cx started with a1, cy, a3 in order
            assert rows[ids["cy"]][0] == "done", n
            assert rows[ids["cx"]] == ("pending", [[10 * n + 1, -n, 10 * n + 4]], 0), n
    # Each started callback is claimable once: the even races' cy, the odd races' cx.
    claimed = claim_all(app, dsn, worker_id=2)
    assert sorted(claimed) == sorted(
        [ids["cy"] for ids in even] + [ids["cx"] for n, ids in enumerate(roles) if n % 2]
    )
    # Finishing the even races' cy starts their cx, with every result in order.
    with psycopg.connect(dsn, autocommit=True) as conn:
        for ids in even:
            written = app.queries.finish_jobs(conn, [returned(ids["cy"], 2, claimed[ids["cy"]], 7)])
            assert written == {ids["cy"]: "done"}
    assert sorted(claim_all(app, dsn, worker_id=3)) == sorted(ids["cx"] for ids in even)
    assert not claim_all(app, dsn, worker_id=4)
    rows = callback_rows(admin, app)
    for n, ids in enumerate(roles):
        if n % 2 == 0:
            assert rows[ids["cx"]][1] == [[10 * n + 1, 7, 10 * n + 4]], n
