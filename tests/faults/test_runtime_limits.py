"""Limits changed at runtime under load, on four ``pgtasks worker`` processes
(migration 0022; docs/howto/operations.md).

A concurrency limit is raised, then lowered while its jobs run: once the change has
returned (acknowledged), no job is claimed while as many as the new limit run, whichever
worker claims it. From the jobs' rows (the database's clock): for each job claimed after
the acknowledgment, the jobs running at its claim (itself included) never outnumber the
new limit. The same for a task the app declares no limit for, whose waiting jobs and new
ones come under the limit set on it (jobs a worker claimed before, to run when a slot of
its own frees, count as running: no claim after the change adds to them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import psycopg
import pytest

from pgtasks import App
from pgtasks._app import controls
from tests.apps.limits_app import LimitTasks, register_limit_tasks
from tests.apps.worker_app import create_executions_table
from tests.support.cli import cli_runner
from tests.support.probe import Probe, wait_all_finished
from tests.support.processes import Processes
from tests.support.waiting import wait_until

APP_PATH = "tests.apps.limits_app:app"
WORKERS = 4


class Env:
    def __init__(self, dsn: str, app: App, processes: Processes) -> None:
        self.dsn, self.app, self.processes = dsn, app, processes
        with psycopg.connect(dsn, autocommit=True) as conn:
            create_executions_table(conn, app.schema)
        self.tasks: LimitTasks = register_limit_tasks(app)
        self.probe = Probe(dsn, app.schema)
        self.cli = cli_runner(app, APP_PATH)

    def start_workers(self) -> None:
        for _ in range(WORKERS):
            self.processes.worker(self.dsn, self.app.schema, "--concurrency=4", wait_started=False)

    def running(self, task: str) -> int:
        rows = self.probe.rows(
            "SELECT count(*) AS n FROM {schema}.jobs WHERE status = 'running' AND task_name = %s",
            [task],
        )
        return int(rows[0]["n"])

    def set_limit(self, name: str, *options: str) -> datetime:
        """``pgtasks limits set``; the database's clock once it returned."""
        result = self.cli("limits", "set", name, *options)
        assert result.returncode == 0, result.stderr
        return self.now()

    def now(self) -> datetime:
        now: datetime = self.probe.rows("SELECT clock_timestamp() AS now")[0]["now"]
        return now

    def most_at_claims_after(self, task: str, acknowledged: datetime) -> tuple[int, int]:
        """(jobs of ``task`` claimed after ``acknowledged``, the most of its jobs running
        at one of those claims, itself included), from the jobs' rows: a job runs from
        its claim (locked_at) until its outcome is written (finished_at; its slot is
        free from that commit on, so this never counts one too few)."""
        rows = self.probe.rows(
            "SELECT locked_at, coalesce(finished_at, 'infinity') AS finished"
            " FROM {schema}.all_jobs WHERE task_name = %s AND locked_at IS NOT NULL",
            [task],
        )
        claims = [row["locked_at"] for row in rows if row["locked_at"] > acknowledged]
        most = max(
            (
                sum(1 for row in rows if row["locked_at"] <= claim < row["finished"])
                for claim in claims
            ),
            default=0,
        )
        return len(claims), most


@pytest.fixture
def env(make_app: Callable[..., App], dsn: str, tmp_path: Path) -> Iterator[Env]:
    processes = Processes(tmp_path, APP_PATH)
    limits_env = Env(dsn, make_app(), processes)
    yield limits_env
    processes.close()
    limits_env.probe.close()


@pytest.mark.timeout(240)  # four workers and CLI processes on a loaded machine
def test_a_concurrency_limit_raised_then_lowered_under_load_is_never_exceeded(env: Env) -> None:
    task = env.tasks.per_task.name  # declared with concurrency=3
    count = 60
    env.tasks.per_task.delay_many([{"seconds": 0.25} for _ in range(count)])
    env.start_workers()
    wait_until(lambda: env.running(task) == 3, timeout=60, message="3 running (declared)")

    env.set_limit(f"task:{task}", "--concurrency", "6")
    # More than the declared 3 run at once: the workers obey the raised limit.
    wait_until(lambda: env.running(task) > 3, timeout=60, message="more than 3 running")

    # Lowered from this process (the CLI's start-up would let the queue drain meanwhile).
    controls.set_limit(env.app, f"task:{task}", concurrency=2)
    acknowledged = env.now()
    wait_all_finished(env.probe, count, timeout=120)

    started, most = env.most_at_claims_after(task, acknowledged)
    print(f"\n[runtime limits] {started} jobs claimed after lowering to 2; most: {most}")
    assert started >= 5
    assert most <= 2

    # The change is audited and reset returns to the declaration.
    audit = env.cli("limits", "audit", "--name", f"task:{task}")
    assert audit.returncode == 0, audit.stderr
    assert audit.stdout.count("concurrency=6") == 2, audit.stdout  # after, then before
    assert "cli:" in audit.stdout and "api:" in audit.stdout
    reset = env.cli("limits", "reset", f"task:{task}")
    assert reset.returncode == 0, reset.stderr
    assert reset.stdout.strip() == f"task:{task}: concurrency=2 rate=- -> concurrency=3 rate=-"


@pytest.mark.timeout(240)  # four workers and CLI processes on a loaded machine
def test_a_limit_set_on_a_task_that_declares_none_holds_for_its_waiting_and_new_jobs(
    env: Env,
) -> None:
    task = env.tasks.free.name
    env.tasks.free.delay_many([{"seconds": 0.3} for _ in range(40)])
    env.start_workers()
    wait_until(lambda: env.running(task) >= 4, timeout=60, message="the free task runs")

    controls.set_limit(env.app, f"task:{task}", concurrency=2)
    acknowledged = env.now()
    env.tasks.free.delay_many([{"seconds": 0.2} for _ in range(8)])  # after: the trigger
    wait_all_finished(env.probe, 48, timeout=120)

    started, most = env.most_at_claims_after(task, acknowledged)
    print(f"\n[runtime limits] undeclared task: {started} claimed after the limit; most: {most}")
    assert started >= 8
    assert most <= 2
    stamped = env.probe.rows(
        "SELECT count(*) AS n FROM {schema}.all_jobs"
        " WHERE task_name = %s AND created_at > %s AND limit_groups = ARRAY[%s]",
        [task, acknowledged, f"task:{task}"],
    )
    assert stamped[0]["n"] == 8

    # Reset: the limit is gone and new jobs are no longer stamped (the trigger is off).
    reset = env.cli("limits", "reset", f"task:{task}")
    assert reset.returncode == 0, reset.stderr
    job = env.tasks.free.apply_async(kwargs={"seconds": 0}, countdown=3600)
    rows = env.probe.rows("SELECT limit_groups FROM {schema}.jobs WHERE id = %s", [job.id])
    assert rows == [{"limit_groups": None}]
    with env.app.connection() as conn:
        assert env.app.queries.get_runtime_limits_trigger(conn) is False
