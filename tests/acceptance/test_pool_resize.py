"""`pgtasks control pool_grow|pool_shrink` on a real ``pgtasks worker`` process
(migration 0022): the worker applies the new size at its next heartbeat, runs that many
jobs at once from then on, and a size beyond the bounds it started with is refused,
saying which they are."""

from __future__ import annotations

from collections.abc import Callable, Iterator
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

pytestmark = pytest.mark.acceptance

APP_PATH = "tests.apps.limits_app:app"


@pytest.fixture
def env(
    make_app: Callable[..., App], dsn: str, tmp_path: Path
) -> Iterator[tuple[App, LimitTasks, Processes, Probe]]:
    app = make_app()
    with psycopg.connect(dsn, autocommit=True) as conn:
        create_executions_table(conn, app.schema)
    processes = Processes(tmp_path, APP_PATH)
    probe = Probe(dsn, app.schema)
    yield app, register_limit_tasks(app), processes, probe
    processes.close()
    probe.close()


@pytest.mark.timeout(180)  # a worker and three CLI processes on a loaded machine
def test_a_worker_pool_grows_and_shrinks_within_its_bounds(
    env: tuple[App, LimitTasks, Processes, Probe], dsn: str
) -> None:
    app, tasks, processes, probe = env
    cli = cli_runner(app, APP_PATH)
    worker = processes.worker(
        dsn, app.schema, "--concurrency=2", "--min-concurrency=1", "--max-concurrency=4"
    )
    worker_id = worker.worker_id()

    def running() -> int:
        rows = probe.rows("SELECT count(*) AS n FROM {schema}.executions WHERE finished IS NULL")
        return int(rows[0]["n"])

    grown = cli("control", "pool_grow", str(worker_id), "2")
    assert grown.returncode == 0, grown.stderr
    assert grown.stdout.strip() == f"worker {worker_id}: pool 2 -> 4 (applied)"
    tasks.free.delay_many([{"seconds": 0.5} for _ in range(12)])
    wait_until(lambda: running() == 4, timeout=20, message="4 jobs running at once")

    change = controls.resize_pool(app, worker_id, -3, actor="test")
    assert (change.before, change.after, change.applied) == (4, 1, True)
    acknowledged = probe.rows("SELECT clock_timestamp() AS now")[0]["now"]
    wait_all_finished(probe, 12, timeout=60)
    rows = probe.rows("SELECT started, finished FROM {schema}.executions")
    later = [row["started"] for row in rows if row["started"] > acknowledged]
    assert later, "no job started after the shrink"
    for start in later:  # one at a time once the shrink was applied
        assert sum(1 for row in rows if row["started"] <= start < row["finished"]) == 1

    beyond = cli("control", "pool_grow", f"pgtasks@host:1:{worker_id}", "4")
    assert beyond.returncode == 1
    assert "5 is beyond the bounds it started with, 1 to 4" in beyond.stderr
    assert cli("control", "pool_shrink", str(worker_id)).returncode == 1  # below 1
    missing = cli("control", "pool_grow", "999999")
    assert missing.returncode == 1 and "no live worker 999999" in missing.stderr
    audit = [row["action"] for row in controls.read_audit(app, prefix="worker:")]
    assert audit == ["pool_shrink", "pool_grow"]
