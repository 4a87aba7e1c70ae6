"""A database whose default isolation is REPEATABLE READ or SERIALIZABLE (set for the
database, as a DBA may): every connection pgtasks opens pins READ COMMITTED, so limits
are never exceeded, workflows move on, and a stale lease's outcome changes nothing.

Real ``pgtasks worker`` processes of ``tests.apps.isolation_app`` (the fault app's and
the limits app's tasks) run against a database of the test's own, whose default is set
with ALTER DATABASE; a plain connection to it starts in that level, which the test checks
first, so the scenario would fail without the pinning."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgtasks import App, chain, chord, group
from tests.apps.fault_app import FaultTasks, register_fault_tasks
from tests.apps.limits_app import TASK_CONCURRENCY, LimitTasks, register_limit_tasks
from tests.apps.worker_app import create_executions_table
from tests.support.environment import ROOT, pgtasks_env
from tests.support.limits import Sampler
from tests.support.probe import (
    Probe,
    assert_invariants,
    wait_started,
    wait_status,
)
from tests.support.processes import RESCUE_BOUND, Processes
from tests.support.schemas import new_schema_name

APP_PATH = "tests.apps.isolation_app:app"


class Scenario:
    def __init__(self, dsn: str, tmp_path: Path) -> None:
        self.dsn = dsn
        self.app = App(dsn, schema=new_schema_name(), connect_timeout=3.0)
        self.app.migrate()
        with psycopg.connect(dsn, autocommit=True) as conn:
            create_executions_table(conn, self.app.schema)
        self.faults: FaultTasks = register_fault_tasks(self.app)
        self.limits: LimitTasks = register_limit_tasks(self.app)
        self.probe = Probe(dsn, self.app.schema)
        self.processes = Processes(tmp_path, APP_PATH)

    def close(self) -> None:
        self.processes.close()
        self.probe.close()
        self.app.close()


@pytest.fixture(params=["repeatable read", "serializable"])
def scenario(request: pytest.FixtureRequest, dsn: str, tmp_path: Path) -> Iterator[Scenario]:
    """A database of its own whose default_transaction_isolation is the parameter."""
    name = f"pgtasks_isolation_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        admin.execute(
            sql.SQL("ALTER DATABASE {} SET default_transaction_isolation = {}").format(
                sql.Identifier(name), sql.Literal(request.param)
            )
        )
    database_dsn = make_conninfo(dsn, dbname=name)
    built = Scenario(database_dsn, tmp_path)
    try:
        yield built
    finally:
        built.close()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def isolation_of(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SHOW transaction_isolation").fetchone()
    assert row is not None
    return str(row[0])


def test_limits_workflows_and_fencing_hold_whatever_the_default_isolation(
    scenario: Scenario, tmp_path: Path
) -> None:
    with psycopg.connect(scenario.dsn, autocommit=True) as plain:
        default = isolation_of(plain)
    assert default in ("repeatable read", "serializable")
    with scenario.app.connection() as pooled:
        assert isolation_of(pooled) == "read committed"

    faults, limits, probe = scenario.faults, scenario.limits, scenario.probe
    sampler = Sampler(scenario.dsn, scenario.app.schema)
    sampler.start()
    workers = [
        scenario.processes.worker(
            scenario.dsn, scenario.app.schema, "--concurrency=4", started_timeout=60.0
        )
        for _ in range(2)
    ]
    limited = limits.per_task.delay_many([{"seconds": 0.3} for _ in range(4 * TASK_CONCURRENCY)])
    steps = chain(faults.sleep.si(0.05), faults.sleep.si(0.05), faults.noop.si()).delay()
    gathered = chord(group([faults.sleep.si(0.05 * n) for n in range(1, 5)]), faults.collect.s())
    gathered_handle = gathered.delay()

    # A stale lease: the worker running this job stops past its lease, another runs it,
    # and the stopped one's late outcome changes nothing.
    release = tmp_path / "release"
    stale_job = faults.wait_for_file.delay(str(release))
    first = wait_started(probe, stale_job.id, timeout=20)
    stale = next(worker for worker in workers if worker.pid == first["pid"])
    stale.send(signal.SIGSTOP)
    release.touch()
    wait_started(probe, stale_job.id, attempt=2, timeout=RESCUE_BOUND + 5)
    done = wait_status(probe, stale_job.id, "done", timeout=20)
    stale.send(signal.SIGCONT)
    stale.wait_for_log(f"job {stale_job.id} worker_app.wait_for_file attempt 1: lease lost")
    assert probe.job(stale_job.id)["locked_by"] == done["locked_by"] != first["worker_id"]

    for job in limited:
        wait_status(probe, job.id, "done", timeout=30)
    steps.get(timeout=30)
    assert steps.status == "done"
    assert gathered_handle.get(timeout=30) == [0.05 * n for n in range(1, 5)]
    sampler.stopping.set()
    sampler.join(5)
    most = sampler.maxima[("task", limits.per_task.name)]
    print(f"\n[isolation {default}] most running under a limit of {TASK_CONCURRENCY}: {most}")
    assert 0 < most <= TASK_CONCURRENCY
    assert_invariants(probe, [job.id for job in limited] + [stale_job.id])

    # doctor names the database default and the pinned level.
    completed = subprocess.run(
        [sys.executable, "-m", "pgtasks", "doctor", "-A", APP_PATH, "--json"],
        cwd=ROOT,
        env=pgtasks_env(scenario.dsn, scenario.app.schema),
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = completed.stdout
    assert f"database default {default.upper()}" in report, report + completed.stderr
    assert "every pgtasks connection runs READ COMMITTED" in report
    for worker in workers:
        worker.send(signal.SIGTERM)
    assert [worker.wait_exit(20) for worker in workers] == [0, 0]
    assert not any("could not serialize" in worker.log() for worker in workers)
