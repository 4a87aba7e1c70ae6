"""Fair queuing and sequences with ``pgtasks worker`` processes (migration 0023).

- Starvation: tenant A's backlog, then tenant B's few jobs, on one worker at concurrency
  10: every B job starts before A runs a bounded number more (the issue's 20,000 / 100 /
  1,000 at a tenth of the size; benchmarks/fairness.py measures the full figure).
- A worker SIGKILLed while it runs a sequence's head: the sequence resumes after the
  rescue, in order, and no other job of it runs twice.
- Ten workers on one sequence key: never two of its jobs at once, in enqueue order."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgtasks import App
from tests.apps.keyed_app import KeyedTasks, register_keyed_tasks
from tests.apps.worker_app import create_executions_table
from tests.support.probe import Probe, assert_invariants, wait_all_finished
from tests.support.processes import Processes
from tests.support.waiting import wait_until

APP_PATH = "tests.apps.keyed_app:app"


class Env:
    def __init__(self, dsn: str, app: App, processes: Processes) -> None:
        self.dsn, self.app, self.processes = dsn, app, processes
        with psycopg.connect(dsn, autocommit=True) as conn:
            create_executions_table(conn, app.schema)
        self.tasks: KeyedTasks = register_keyed_tasks(app)
        self.probe = Probe(dsn, app.schema)

    def executions(self) -> list[dict[str, Any]]:
        return self.probe.rows(
            "SELECT job_id, attempt, started, finished FROM {schema}.executions ORDER BY id"
        )


@pytest.fixture
def env(make_app: Callable[..., App], dsn: str, tmp_path: Path) -> Iterator[Env]:
    processes = Processes(tmp_path, APP_PATH)
    keyed_env = Env(dsn, make_app(), processes)
    yield keyed_env
    processes.close()
    keyed_env.probe.close()


def max_overlap(intervals: list[tuple[datetime, datetime]]) -> int:
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = most = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


def test_a_small_tenant_is_not_starved_by_a_large_backlog(env: Env) -> None:
    a_jobs, b_jobs, bound = 2000, 10, 100
    tenant_job = env.tasks.tenant_job
    tenant_job.delay_many([{"tenant": "A", "n": n} for n in range(a_jobs)])
    worker = env.processes.worker(env.dsn, env.app.schema, "--concurrency=10")

    def started(tenant: str) -> int:
        return int(
            env.probe.rows(
                "SELECT count(*) AS n FROM {schema}.all_jobs"
                " WHERE meta ->> 'pgtasks.fair_key' = %s AND started_at IS NOT NULL",
                (tenant,),
            )[0]["n"]
        )

    wait_until(lambda: started("A") >= 200, timeout=60, message="200 of A's jobs started")
    b_ids = {h.id for h in tenant_job.delay_many([{"tenant": "B", "n": n} for n in range(b_jobs)])}
    # B's jobs are visible from the commit of their enqueue, which has returned now.
    b_enqueued = env.probe.rows("SELECT clock_timestamp() AS now")[0]["now"]
    wait_all_finished(env.probe, a_jobs + b_jobs, timeout=120)
    worker.stop()
    rows = env.probe.rows("SELECT id, started_at FROM {schema}.all_jobs ORDER BY started_at, id")
    last_b = max(row["started_at"] for row in rows if row["id"] in b_ids)
    a_meanwhile = sum(
        1 for row in rows if row["id"] not in b_ids and b_enqueued <= row["started_at"] <= last_b
    )
    print(f"\n[fairness] A's jobs started after B's enqueue, before B's last start: {a_meanwhile}")
    assert a_meanwhile <= bound


def test_a_sequence_resumes_in_order_after_its_worker_is_killed(env: Env) -> None:
    handles = [
        env.tasks.ordered.delay(account="acct", n=n, seconds=0.3 if n != 2 else 30)
        for n in range(5)
    ]
    ids = [handle.id for handle in handles]
    victim = env.processes.worker(env.dsn, env.app.schema, "--concurrency=4")
    wait_until(
        lambda: any(row["job_id"] == ids[2] for row in env.executions()),
        timeout=30,
        message="the third job of the sequence to start",
    )
    victim.send(signal.SIGKILL)
    victim.wait_exit(10)
    # The killed head runs again, short this time (its row says how long).
    env.probe.rows(
        "UPDATE {schema}.jobs SET kwargs = kwargs || '{{\"seconds\": 0.1}}' WHERE id = %s"
        " RETURNING id",
        (ids[2],),
    )
    rescuer = env.processes.worker(env.dsn, env.app.schema, "--concurrency=4")
    wait_all_finished(env.probe, len(ids), timeout=60)
    rescuer.stop()
    runs = env.executions()
    assert [row["job_id"] for row in runs] == [ids[0], ids[1], ids[2], ids[2], ids[3], ids[4]]
    finished = [row for row in runs if row["finished"] is not None]
    assert sorted(row["job_id"] for row in finished) == ids
    assert max_overlap([(row["started"], row["finished"]) for row in finished]) == 1
    assert_invariants(env.probe, ids)


def test_ten_workers_never_run_two_jobs_of_one_sequence_at_once(env: Env) -> None:
    handles = env.tasks.ordered.delay_many(
        [{"account": "one", "n": n, "seconds": 0.02} for n in range(40)]
    )
    others = env.tasks.ordered.delay_many(
        [{"account": f"other-{n % 4}", "n": n, "seconds": 0.02} for n in range(20)]
    )
    workers = [
        env.processes.worker(env.dsn, env.app.schema, "--concurrency=4", wait_started=False)
        for _ in range(10)
    ]
    total = len(handles) + len(others)
    wait_all_finished(env.probe, total, timeout=120)
    for worker in workers:
        worker.stop()
    ids = [handle.id for handle in handles]
    runs = [row for row in env.executions() if row["job_id"] in set(ids)]
    assert [row["job_id"] for row in runs] == ids
    assert max_overlap([(row["started"], row["finished"]) for row in runs]) == 1
    assert_invariants(env.probe, ids + [handle.id for handle in others])
