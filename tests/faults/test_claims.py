"""The claim and rescue statements under contention, on real sessions (scenarios 2, 3 and
6 of the fault suite; see docs/guarantees.md)."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg import sql

from pgtasks._leases import ClaimRequest, Finish
from pgtasks._retry import Outcome
from pgtasks._store.claims import claim_statement
from pgtasks._worker.connection import WORKER_CONNECTION_OPTIONS
from tests.support.faults import FaultEnv
from tests.support.probe import assert_invariants
from tests.support.waiting import wait_until

T = TypeVar("T")


@pytest.fixture
def sessions(env: FaultEnv) -> Iterator[Callable[[], psycopg.Connection[Any]]]:
    """Connections configured like a worker's (autocommit, worker session options)."""
    opened: list[psycopg.Connection[Any]] = []

    def open_session(autocommit: bool = True) -> psycopg.Connection[Any]:
        opened.append(
            psycopg.connect(env.dsn, autocommit=autocommit, options=WORKER_CONNECTION_OPTIONS)
        )
        return opened[-1]

    yield open_session
    for conn in opened:
        conn.close()


def together(first: Callable[[], T], second: Callable[[], T]) -> tuple[T, T]:
    """Run both on two threads released at the same moment by a barrier."""
    barrier = threading.Barrier(2)

    def released(function: Callable[[], T]) -> T:
        barrier.wait(5)
        return function()

    with ThreadPoolExecutor(2) as pool:
        one, two = pool.submit(released, first), pool.submit(released, second)
        return one.result(10), two.result(10)


def test_two_claimers_released_together_get_disjoint_jobs_covering_all(
    env: FaultEnv, sessions: Callable[..., psycopg.Connection[Any]]
) -> None:
    store = env.app.queries
    one, two = sessions(), sessions()
    ids = [
        store.register_worker(one, hostname="race", pid=n, queues=None, concurrency=8)
        for n in (1, 2)
    ]
    for round_number in range(200):
        queue = f"race{round_number}"
        with env.app.connection() as conn:
            jobs = [env.tasks.noop.apply_async(queue=queue, connection=conn).id for _ in range(12)]
        first, second = together(
            lambda queue=queue: store.claim_jobs(one, ClaimRequest(ids[0], 8, queues=(queue,))),
            lambda queue=queue: store.claim_jobs(two, ClaimRequest(ids[1], 8, queues=(queue,))),
        )
        got_first = {job.id for job in first}
        got_second = {job.id for job in second}
        assert not got_first & got_second, (round_number, got_first & got_second)
        assert got_first | got_second == set(jobs), round_number
    owners = env.probe.rows(
        "SELECT count(*) AS n, count(DISTINCT id) AS jobs FROM {schema}.all_jobs"
        " WHERE status = 'running' AND attempts = 1"
    )
    assert owners == [{"n": 2400, "jobs": 2400}]


def test_claim_among_200000_finished_jobs_touches_only_what_it_returns(
    env: FaultEnv, sessions: Callable[..., psycopg.Connection[Any]]
) -> None:
    schema = sql.Identifier(env.schema)
    admin = sessions()
    admin.execute(
        sql.SQL(
            "INSERT INTO {}.jobs (task_name, queue, args, kwargs, status, attempts,"
            " max_attempts, finished_at, result)"
            " SELECT 'worker_app.noop', 'default', '[]', '{{}}',"
            " (ARRAY['done', 'failed', 'cancelled'])[1 + n % 3], 1, 1, now(), 'null'"
            " FROM generate_series(1, 200000) AS n"
        ).format(schema)
    )
    pending = [handle.id for handle in env.tasks.noop.delay_many([{}] * 1000)]
    admin.execute(sql.SQL("ANALYZE {}.jobs").format(schema))
    store = env.app.queries
    worker_id = store.register_worker(admin, hostname="plan", pid=1, queues=None, concurrency=50)

    conn = sessions(autocommit=False)
    _, params = claim_statement(ClaimRequest(worker_id, 50))
    plan = "\n".join(
        row[0]
        for row in conn.execute(
            b"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + store._statements["claim_jobs"], params
        )
    )
    conn.rollback()
    print(f"\n[fault 3] claim of 50 among 200,000 finished and 1,000 pending:\n{plan}")
    assert "Index Scan using jobs_claim_idx" in plan, plan
    assert "Seq Scan" not in plan and "Bitmap" not in plan, plan
    # Sorted: only the priority levels (found lowest first), never jobs.
    assert re.findall(r"Sort Key: (.*)", plan) == ["levels_1.priority DESC"], plan
    # The index walk stops after the 50 rows it returns: it reads no finished row (they
    # are not in the partial index) and no pending row beyond the limit. (The priority
    # levels are found by an index-only scan of their own, one entry each.)
    scan = next(line for line in plan.splitlines() if "Index Scan using jobs_claim_idx" in line)
    assert re.search(r"rows=50(\.00)? loops=1", scan), scan
    # No job read and filtered out by the scan (the levels' list ends with a NULL it drops).
    lines = plan.splitlines()
    at = lines.index(scan)
    depth = len(scan) - len(scan.lstrip())
    details = []
    for line in lines[at + 1 :]:
        if line.strip().startswith("->") and len(line) - len(line.lstrip()) <= depth + 2:
            break
        details.append(line)
    assert not any("Rows Removed by Filter" in line for line in details), plan

    # Claim everything, 50 at a time, as a worker would; finish each batch.
    claimed: list[int] = []
    while batch := store.claim_jobs(admin, ClaimRequest(worker_id, limit=50)):
        claimed += [job.id for job in batch]
        store.finish_jobs(admin, [Finish.of(job, Outcome.done("null")) for job in batch])
    assert sorted(claimed) == sorted(pending)
    assert env.probe.rows(
        "SELECT count(*) AS n FROM {schema}.all_jobs WHERE attempts > max_attempts"
    ) == [{"n": 0}]
    assert_invariants(env.probe, pending, executed=False)


class RescueRace:
    """One worker registration whose job is claimed, then presumed dead (stale heartbeat)."""

    def __init__(self, env: FaultEnv, conn: psycopg.Connection[Any]) -> None:
        self.env = env
        self.queries = env.app.queries
        self.conn = conn
        self.rounds = 0
        self.worker_id = self.queries.register_worker(
            conn, hostname="stale", pid=1, queues=None, concurrency=1
        )

    def claimed_job(self) -> int:
        self.rounds += 1
        queue = f"rescue{self.rounds}"  # a job released by an earlier round is not claimed
        job_id: int = self.env.tasks.noop.apply_async(queue=queue).id
        claimed = self.queries.claim_jobs(
            self.conn, ClaimRequest(self.worker_id, 1, queues=(queue,))
        )
        assert [job.id for job in claimed] == [job_id]
        self.conn.execute(
            sql.SQL(
                "UPDATE {}.workers SET heartbeat_at = now() - interval '1 hour' WHERE id = %s"
            ).format(sql.Identifier(self.env.schema)),
            (self.worker_id,),
        )
        return job_id

    def finish(self, conn: psycopg.Connection[Any], job_id: int) -> dict[int, str]:
        finish = Finish(job_id, self.worker_id, 1, "done", result_json='"ok"')
        return self.queries.finish_jobs(conn, [finish])

    def rescue(self, conn: psycopg.Connection[Any]) -> list[int]:
        return [row["id"] for row in self.queries.rescue_jobs(conn, lease_timeout=2.0)]

    def status(self, job_id: int) -> str:
        status: str = self.env.probe.job(job_id)["status"]
        return status


def test_a_rescue_racing_a_completion_never_returns_a_completed_job_to_pending(
    env: FaultEnv, sessions: Callable[..., psycopg.Connection[Any]]
) -> None:
    race = RescueRace(env, sessions())
    rescuer = sessions()

    # 1. The completing transaction holds the row: the rescue skips it, the job ends done.
    job_id = race.claimed_job()
    completing = sessions(autocommit=False)
    assert race.finish(completing, job_id) == {job_id: "done"}
    assert race.rescue(rescuer) == []
    completing.commit()
    assert race.rescue(rescuer) == []
    assert race.status(job_id) == "done"

    # 2. The rescue holds the row: the completion waits, then finds its lease gone.
    job_id = race.claimed_job()
    rescuing = sessions(autocommit=False)
    assert race.rescue(rescuing) == [job_id]
    with ThreadPoolExecutor(1) as pool:
        completion = pool.submit(race.finish, sessions(), job_id)
        wait_until(
            lambda: (
                env.probe.rows(
                    # The statement's head: pg_stat_activity keeps its first kilobyte only.
                    "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE '%%Record a batch of outcomes%%'"
                )
                == [{"n": 1}]
            ),
            message="the completion to wait for the rescue's row lock",
        )
        rescuing.commit()
        assert completion.result(10) == {}  # fenced out: nothing written
    assert race.status(job_id) == "pending"

    # 3. Both released together, 200 times: exactly one of them wins, and a job whose
    # completion was accepted is never pending afterwards.
    outcomes = {"completed": 0, "rescued": 0}
    finisher = sessions()
    for _ in range(200):
        job_id = race.claimed_job()
        finished, rescued = together(
            lambda job_id=job_id: race.finish(finisher, job_id), lambda: race.rescue(rescuer)
        )
        assert bool(finished) != bool(rescued), (job_id, finished, rescued)
        assert race.status(job_id) == ("done" if finished else "pending")
        outcomes["completed" if finished else "rescued"] += 1
    print(f"\n[fault 6] 200 rescue/completion races: {outcomes}")
