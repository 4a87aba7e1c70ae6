"""Durable steps under faults, in real ``pgtasks worker`` processes and real signals
(tests/apps/durable_app.py): a SIGKILLed worker's job resumes after its last checkpoint;
a SIGSTOPped worker's stale checkpoint is refused by the lease fence (and counted); a
sleep outlives a worker restart; an event emitted by another process wakes a waiting job
only if its transaction commits."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgtasks import App, JobStatus
from tests.apps.durable_app import Tasks, create_effects_table, effects, register_tasks
from tests.support.environment import ROOT, pgtasks_env
from tests.support.processes import RESCUE_BOUND, Processes
from tests.support.waiting import stays_true, wait_until

APP_PATH = "tests.apps.durable_app:app"


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    running = Processes(tmp_path, APP_PATH)
    yield running
    running.close()


@pytest.fixture
def tasks(app: App, dsn: str, monkeypatch: pytest.MonkeyPatch) -> Tasks:
    monkeypatch.setenv("PGTASKS_DSN", dsn)
    monkeypatch.setenv("PGTASKS_TEST_SCHEMA", app.schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        create_effects_table(conn, app.schema)
    return register_tasks(app)


def test_a_sigkilled_worker_resumes_after_its_last_checkpoint(
    app: App, dsn: str, tasks: Tasks, processes: Processes, tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    first = processes.worker(dsn, app.schema)
    handle = tasks.five_steps.delay(hold=str(hold))
    wait_until(Path(f"{hold}.reached").exists, timeout=20, message="steps 1-2 done")
    first.send(signal.SIGKILL)
    first.wait_exit(10)
    hold.touch()
    processes.worker(dsn, app.schema)
    assert handle.get(timeout=RESCUE_BOUND + 30) == 150
    # Steps 1-2 never ran again; 3-5 ran once, on the attempt after the rescue.
    assert effects(dsn, app.schema, handle.id) == [
        ("step1", 1),
        ("step2", 1),
        ("step3", 2),
        ("step4", 2),
        ("step5", 2),
    ]


def test_a_stale_attempts_checkpoint_is_refused(
    app: App, dsn: str, tasks: Tasks, processes: Processes, tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    stale = processes.worker(dsn, app.schema)
    handle = tasks.held_step.delay(str(hold))
    wait_until(Path(f"{hold}.1.reached").exists, timeout=20, message="attempt 1 in its step")
    before = app.admin.counters()
    stale.send(signal.SIGSTOP)
    other = processes.worker(dsn, app.schema)
    wait_until(Path(f"{hold}.2.reached").exists, timeout=RESCUE_BOUND + 10, message="attempt 2")
    hold.touch()
    result = handle.get(timeout=30)
    assert result[0] == f"attempt 2 in {other.pid}"
    stale.send(signal.SIGCONT)  # its step returns: its checkpoint is refused
    stale.wait_for_log("the checkpoint of step 'held' was not recorded", timeout=20)
    stale.send(signal.SIGTERM)
    assert stale.wait_exit(15) == 0
    after = app.admin.counters()
    assert after["fenced_writes_refused"] > before["fenced_writes_refused"]
    assert after["lease_lost"] > before["lease_lost"]
    steps = app.get_job_steps(handle.id)
    assert [(step["name"], step["attempt"]) for step in steps] == [("held", 2), ("after", 2)]
    assert steps[0]["result"] == f"attempt 2 in {other.pid}"
    # Both attempts ran the step (at least once, outside the database); the stale one's
    # record never landed, and "after" ran once.
    assert effects(dsn, app.schema, handle.id) == [("held", 1), ("held", 2), ("after", 2)]


def test_a_sleep_outlives_a_worker_restart(
    app: App, dsn: str, tasks: Tasks, processes: Processes
) -> None:
    first = processes.worker(dsn, app.schema)
    handle = tasks.sleeper.delay(3)
    wait_until(lambda: "pgtasks.parked" in handle.fetch().meta, timeout=20, message="asleep")
    assert first.stop() == 0
    processes.worker(dsn, app.schema)
    assert handle.get(timeout=30) == "woke"
    assert handle.attempts == 1
    assert effects(dsn, app.schema, handle.id) == [("before", 1), ("after", 1)]


EMIT = """
import sys, psycopg
from tests.apps.durable_app import app
with psycopg.connect(sys.argv[1]) as conn:
    app.emit_event(sys.argv[2], {"from": "another process"}, connection=conn)
    conn.commit() if sys.argv[3] == "commit" else conn.rollback()
"""


def test_an_event_from_another_process_wakes_only_if_committed(
    app: App, dsn: str, tasks: Tasks, processes: Processes
) -> None:
    processes.worker(dsn, app.schema)
    handle = tasks.waiter.delay("invoice:7")
    wait_until(lambda: "pgtasks.parked" in handle.fetch().meta, timeout=20, message="waiting")
    env = pgtasks_env(dsn, app.schema)
    for ending in ("rollback", "commit"):
        done = subprocess.run(
            [sys.executable, "-c", EMIT, dsn, "invoice:7", ending],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        if ending == "rollback":  # nothing happened: it stays parked past a poll or two
            assert stays_true(lambda: handle.fetch().status is JobStatus.PENDING, 1.0)
            assert app.count_parked_jobs() == {"default": {"waiting": 1}}
    assert handle.get(timeout=30) == {"from": "another process"}
    assert effects(dsn, app.schema, handle.id) == [("before", 1), ("after", 1)]
