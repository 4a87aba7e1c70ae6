"""Scenario 13: a task leaks pooled connections in open transactions.

Heartbeats, rescue and beat run on connections of their own, so they keep working; the
task that then needs the exhausted pool fails with an error that names the pool.
"""

from __future__ import annotations

from typing import Any

import psycopg

from pgtasks._leases import ClaimRequest
from tests.support.faults import FaultEnv
from tests.support.probe import wait_started, wait_status
from tests.support.waiting import wait_until


def heartbeat_of(env: FaultEnv, worker_id: int) -> Any:
    rows = env.probe.rows("SELECT heartbeat_at FROM {schema}.workers WHERE id = %s", [worker_id])
    return rows[0]["heartbeat_at"] if rows else None


def tick_jobs(env: FaultEnv) -> int:
    rows = env.probe.rows(
        "SELECT count(*) AS n FROM {schema}.all_jobs WHERE task_name = 'fault_app.tick'"
    )
    return int(rows[0]["n"])


def test_a_leaked_pool_does_not_stop_heartbeats_rescue_or_beat(env: FaultEnv) -> None:
    worker = env.worker("--beat", "--concurrency", "3", PGTASKS_TEST_POOL_MAX="1")
    leak = env.tasks.leak_transaction.delay(seconds=12)
    wait_started(env.probe, leak.id)

    # While the only pooled connection is held in an open transaction:
    # 1. a task that enqueues through the pool fails, and says why;
    needs_pool = env.tasks.enqueue_noop.delay()
    failed = wait_status(env.probe, needs_pool.id, "failed", timeout=15)
    assert "PoolExhaustedError" in failed["last_error"]
    assert "pool_max_size" in failed["last_error"]

    # 2. the worker keeps heartbeating on its own connection;
    worker_id = worker.worker_id()
    first = heartbeat_of(env, worker_id)
    wait_until(lambda: heartbeat_of(env, worker_id) != first, timeout=5, message="a heartbeat")

    # 3. the rescuer still rescues a job held by a dead worker;
    # Enqueue and claim it for a worker that does not exist, in one transaction, so the
    # live worker never sees it pending.
    with psycopg.connect(env.dsn) as admin, admin.transaction():
        orphan = env.tasks.noop.apply_async(queue="orphans", connection=admin)
        claim = ClaimRequest(10**9, limit=1, queues=("orphans",))
        claimed = env.app.queries.claim_jobs(admin, claim)
    assert [job.id for job in claimed] == [orphan.id]
    rescued = wait_status(env.probe, orphan.id, "done", timeout=10)
    assert rescued["attempts"] == 2  # the dead worker's attempt, then the rescued run

    # 4. and beat keeps enqueuing ticks (which run: they need no pooled connection).
    ticks = tick_jobs(env)
    wait_until(lambda: tick_jobs(env) >= ticks + 2, timeout=6, message="two more ticks")
