"""Operating durable jobs: ``pgtasks jobs show`` / ``jobs list`` / ``stats`` show steps,
parked states and the step counters; ``pgtasks events emit`` and ``jobs fork``; the
steps of a finished job live in its history row and leave job_steps; workflows take
durable tasks unchanged. Real ``pgtasks worker`` processes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgtasks import App, chain
from tests.apps.durable_app import Tasks, create_effects_table, effects, register_tasks
from tests.support.cli import cli_runner
from tests.support.processes import Processes
from tests.support.waiting import wait_until

APP_PATH = "tests.apps.durable_app:app"


@pytest.fixture
def tasks(app: App, dsn: str, monkeypatch: pytest.MonkeyPatch) -> Tasks:
    monkeypatch.setenv("PGTASKS_DSN", dsn)
    monkeypatch.setenv("PGTASKS_TEST_SCHEMA", app.schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        create_effects_table(conn, app.schema)
    return register_tasks(app)


@pytest.fixture
def processes(tmp_path: Path, app: App, dsn: str, tasks: Tasks) -> Iterator[Processes]:
    running = Processes(tmp_path, APP_PATH)
    running.worker(dsn, app.schema, "--concurrency=4")
    yield running
    running.close()


@pytest.mark.timeout(120)
def test_cli_shows_steps_and_forks(app: App, dsn: str, tasks: Tasks, processes: Processes) -> None:
    cli = cli_runner(app, APP_PATH)
    done = tasks.five_steps.delay(fail_once=True)
    assert done.get(timeout=30) == 150
    shown = cli("jobs", "show", str(done.id))
    assert shown.returncode == 0, shown.stderr
    assert "steps:" in shown.stdout and "1. step1 #1 done (attempt 1" in shown.stdout
    document = json.loads(cli("jobs", "show", str(done.id), "--json").stdout)
    assert [step["name"] for step in document["steps"]] == [f"step{n}" for n in range(1, 6)]
    with psycopg.connect(dsn, autocommit=True) as conn:  # the steps left job_steps
        left = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.job_steps WHERE job_id = %s").format(
                sql.Identifier(app.schema)
            ),
            (done.id,),
        ).fetchone()
    assert left == (0,)

    forked = cli("jobs", "fork", str(done.id), "--from-step", "step4", "--json")
    assert forked.returncode == 0, forked.stderr
    fork_id = json.loads(forked.stdout)["id"]
    assert app.get_job(fork_id).get(timeout=30) == 150
    assert [step for step, _ in effects(dsn, app.schema, fork_id)] == ["step4", "step5"]
    missing = cli("jobs", "fork", str(done.id), "--from-step", "nope")
    assert missing.returncode != 0 and "no step 'nope'" in missing.stderr
    # Counted by the worker, stored with its heartbeat: 5 + 2 written; 3 replayed by the
    # retry, 3 by each of the fork's two attempts.
    wait_until(
        lambda: (
            (app.admin.counters()["steps_checkpointed"], app.admin.counters()["steps_replayed"])
            == (7, 9)
        ),
        timeout=20,
        message="the step counters stored",
    )


@pytest.mark.timeout(120)
def test_cli_shows_parked_jobs_and_emits_events(
    app: App, tasks: Tasks, processes: Processes
) -> None:
    cli = cli_runner(app, APP_PATH)
    waiting = tasks.waiter.delay("ship:9")
    asleep = tasks.sleeper.delay(3600)
    wait_until(
        lambda: app.count_parked_jobs() == {"default": {"sleeping": 1, "waiting": 1}},
        timeout=20,
        message="one job asleep, one waiting",
    )
    listed = cli("jobs", "list")
    assert "pending (sleeping)" in listed.stdout and "pending (waiting)" in listed.stdout
    assert "event 'ship:9'" in cli("jobs", "show", str(waiting.id)).stdout
    stats = json.loads(cli("stats", "--json").stdout)
    assert stats["parked"] == {"default": {"sleeping": 1, "waiting": 1}}
    emitted = cli("events", "emit", "ship:9", "--payload", '{"carrier": "x"}')
    assert emitted.returncode == 0, emitted.stderr
    assert waiting.get(timeout=30) == {"carrier": "x"}
    bad = cli("events", "emit", "ship:9", "--payload", "{not json")
    assert bad.returncode != 0 and "not JSON" in bad.stderr
    assert cli("events", "emit", "").returncode != 0
    asleep.cancel()


def test_workflows_take_durable_tasks_unchanged(
    app: App, tasks: Tasks, processes: Processes
) -> None:
    workflow = chain(tasks.five_steps.s(), tasks.waiter.si("never", timeout=0.2)).delay()
    assert workflow.get(timeout=30) == "timed out"


def test_cli_retry_keeps_the_checkpoints_before_the_failed_step(
    app: App, dsn: str, tasks: Tasks, processes: Processes
) -> None:
    cli = cli_runner(app, APP_PATH)
    failed = tasks.failing_step.delay()
    wait_until(lambda: failed.status() == "failed", timeout=30, message="the step's final error")
    assert [step["status"] for step in app.get_job_steps(failed.id)] == ["failed"]
    retried = cli("jobs", "retry", str(failed.id), "--keep-steps", "--json")
    assert retried.returncode == 0, retried.stderr
    document = json.loads(retried.stdout)
    assert document["retried"] and document["steps_kept"] == 0  # the failed step runs again
    wait_until(lambda: failed.status() == "failed", timeout=30, message="failed again")
    assert [step for step, _ in effects(dsn, app.schema, failed.id)].count("boom") == 3
