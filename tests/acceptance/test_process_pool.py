"""The process pool of real ``pgtasks worker`` processes: cores, killed children, shutdown.

Workers run ``tests.apps.executor_app:app`` in the test's schema; tasks record each run
(job, attempt, pid) in ``<schema>.executions``. Tests wait on SQL conditions or logs,
never on sleeps. Measured figures are printed (``pytest -s`` shows them).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgtasks import App, JobStatus
from tests.apps.executor_app import Tasks, register_tasks
from tests.apps.worker_app import create_executions_table
from tests.support.inprocess import finished, recorded_runs, registered_workers
from tests.support.processes import (
    STARTED_BOUND,
    ChildProcess,
    Processes,
    child_pids,
    is_alive,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

APP_PATH = "tests.apps.executor_app:app"
#: How long a stopping worker may take to exit on a machine under any load: a failure
#: bound, never a measure (what a test proves of a stop, it reads in the worker's log).
STOP_BOUND = 30.0

SpawnWorker = Callable[..., ChildProcess]


@pytest.fixture
def tasks(app: App, admin: psycopg.Connection[Any]) -> Tasks:
    create_executions_table(admin, app.schema)
    return register_tasks(app)


@pytest.fixture
def spawn_worker(dsn: str, app: App, tmp_path: Path) -> Iterator[SpawnWorker]:
    """Start ``pgtasks worker -A tests.apps.executor_app:app``; killed afterwards if alive."""
    processes = Processes(tmp_path, APP_PATH)

    def spawn(*arguments: str, new_session: bool = False) -> ChildProcess:
        return processes.worker(
            dsn, app.schema, *arguments, started_timeout=STARTED_BOUND, new_session=new_session
        )

    yield spawn
    # The pool children of the workers, found while their parents still run.
    children = [pid for worker in processes.children for pid in child_pids(worker.pid)]
    processes.close()
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_cpu_bound_task_uses_more_than_one_core(
    app: App, tasks: Tasks, spawn_worker: SpawnWorker, tmp_path: Path
) -> None:
    """Two CPU-bound jobs run at the same time in two pool children, not in the worker.

    Each job says it started (a file), then spins in pure Python until both have
    started (20 s at most). Jobs that one interpreter ran one after the other could not
    meet: the first would spin alone until its limit. Jobs in one process could meet
    but share one interpreter lock. Here both meet, in two processes whose parent is
    the worker, so their Python code runs on as many cores as the machine gives two
    processes. No CPU time is measured: a busy machine slows the jobs, never the proof.
    """
    worker = spawn_worker("--processes=2")
    meeting = tmp_path / "meeting"
    meeting.mkdir()
    handles = [tasks.burn.delay(str(meeting), 2, 20.0) for _ in range(2)]
    results = [finished(handle, timeout=40).result for handle in handles]
    print(f"\n2 CPU-bound jobs on 2 children: {results}")
    assert all(result["met"] for result in results), results
    assert len({result["pid"] for result in results}) == 2
    assert {result["parent"] for result in results} == {worker.pid}
    assert worker.pid not in {result["pid"] for result in results}
    # Each started before the other ended: the two ran at once.
    assert max(result["start"] for result in results) < min(r["end"] for r in results)
    assert len(os.listdir(meeting)) == 2


@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_a_child_killed_mid_job_costs_one_attempt_and_the_pool_is_restored(
    app: App,
    admin: psycopg.Connection[Any],
    tasks: Tasks,
    spawn_worker: SpawnWorker,
    start_method: str,
) -> None:
    worker = spawn_worker("--processes=2", f"--process-start-method={start_method}")
    wait_until(lambda: len(child_pids(worker.pid)) == 2, message="two children")
    job = tasks.sleep.delay(30.0, retry_seconds=0.0)
    wait_until(lambda: recorded_runs(admin, app, job.id), message="the first attempt to start")
    [(_, victim)] = recorded_runs(admin, app, job.id)
    assert victim in child_pids(worker.pid)

    os.kill(victim, signal.SIGKILL)
    row = finished(job, timeout=10)

    assert (row.status, row.attempts, row.result) == (JobStatus.DONE, 2, 2)
    assert row.last_error is not None
    assert f"worker child {victim} exited with signal 9 (SIGKILL)" in row.last_error
    assert [attempt for attempt, _ in recorded_runs(admin, app, job.id)] == [1, 2]
    wait_until(
        lambda: len(children := child_pids(worker.pid)) == 2 and victim not in children,
        message="the pool to be back to two children",
    )
    worker.wait_for_log(f"worker child {victim} exited with signal 9 (SIGKILL) while running")
    worker.send(signal.SIGTERM)
    assert worker.wait_exit(10) == 0


def test_sigterm_with_every_executor_busy_releases_every_job_and_exits_in_time(
    app: App,
    admin: psycopg.Connection[Any],
    tasks: Tasks,
    spawn_worker: SpawnWorker,
    tmp_path: Path,
) -> None:
    shutdown_timeout = 1.0
    worker = spawn_worker(
        "--processes=1", "--concurrency=2", f"--shutdown-timeout={shutdown_timeout}"
    )
    never = str(tmp_path / "never-created")
    handles = [
        tasks.hold.delay(never),
        tasks.thread_hold.delay(never),
        tasks.async_hold.delay(never),
    ]
    wait_until(
        lambda: all(recorded_runs(admin, app, handle.id) for handle in handles),
        message="a job on every executor",
    )
    children = child_pids(worker.pid)
    assert len(children) == 1

    worker.send(signal.SIGTERM)
    # The jobs never end (their file is never created): only the shutdown deadline can end
    # the worker's wait for them. The bound below is for a machine under any load; a worker
    # that waited for its jobs would never exit.
    assert worker.wait_exit(STOP_BOUND) == 0, worker.log()
    log = worker.log()

    rows = app.get_jobs([handle.id for handle in handles])
    assert [(row.status, row.attempts) for row in rows] == [(JobStatus.PENDING, 0)] * 3
    assert not any(is_alive(pid) for pid in children)
    assert registered_workers(admin, app) == []
    waited = re.search(r"stopping: waiting up to (\d+\.\d) s for 3 running job\(s\)", log)
    assert waited is not None and float(waited[1]) <= shutdown_timeout, log
    released = ", ".join(str(handle.id) for handle in handles)
    assert (
        "shutdown deadline reached; released 3 running job(s) back to pending"
        f" (attempt not used up): {released}"
    ) in log


def test_sigterm_to_the_whole_process_group_lets_the_childs_job_finish(
    app: App,
    admin: psycopg.Connection[Any],
    tasks: Tasks,
    spawn_worker: SpawnWorker,
) -> None:
    """systemd's default KillMode signals every process: only the worker may stop children."""
    worker = spawn_worker("--processes=1", "--shutdown-timeout=10", new_session=True)
    job = tasks.sleep.delay(1.0)
    wait_until(lambda: recorded_runs(admin, app, job.id), message="the job to start")

    os.killpg(worker.pid, signal.SIGTERM)
    assert worker.wait_exit(10) == 0

    row = app.get_jobs([job.id])[0]
    assert (row.status, row.attempts, row.result) == (JobStatus.DONE, 1, 1)
    log = worker.log()
    assert "ignoring a SIGTERM the worker did not send" in log
    assert "released" not in log
