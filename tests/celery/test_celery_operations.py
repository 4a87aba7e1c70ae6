"""The operations a Celery user types, as real subprocesses on the Next Steps project:
``-A proj`` found as Celery finds it (proj, proj.celery, proj.celery:app), ``worker -Q
-c``, ``inspect``, ``control revoke --terminate``, ``control cancel_consumer`` /
``add_consumer``, ``result``, ``call`` and ``purge``."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import CliRunner, Result

from pgtasks.celery import states
from pgtasks.cli import main
from tests.support.celery_projects import Project
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance


def _runner(steps: Project) -> Callable[..., Result]:
    """The command line in this process (the worker is a real subprocess; a Python start
    per command would only add seconds)."""
    runner = CliRunner()

    def run(*arguments: str) -> Result:
        return runner.invoke(main, list(arguments), catch_exceptions=False)

    return run


def test_the_celery_command_lines_on_the_next_steps_project(
    project: Callable[[str], Project],
) -> None:
    steps = project("next_steps")
    run = _runner(steps)
    tasks = steps.module("proj.tasks")

    # -A proj.celery:app enqueues; `result` reads it back once a worker ran it.
    called = run("-A", "proj.celery:app", "call", "proj.tasks.add", "--args", "[2, 2]")
    assert called.exit_code == 0, called.output
    job_id = called.stdout.strip()
    worker = steps.worker("proj.celery", "-Q", "celery,other", "-c", "3")
    assert "concurrency=3" in worker.log() and "queues=celery,other" in worker.log()
    wait_until(lambda: tasks.add.AsyncResult(job_id).ready(), timeout=60, message="done")
    shown = run("-A", "proj", "result", job_id)
    assert shown.stdout.strip() == "4", shown.output

    pinged = json.loads(run("-A", "proj", "inspect", "ping", "--json").stdout)
    assert list(pinged.values()) == [{"ok": "pong"}]
    registered = json.loads(run("-A", "proj", "inspect", "registered", "--json").stdout)
    assert {"proj.tasks.add", "proj.tasks.mul", "proj.tasks.xsum"} <= set(
        next(iter(registered.values()))
    )

    # cancel_consumer pauses the queue for every worker; add_consumer resumes it.
    paused = run("-A", "proj", "control", "cancel_consumer", "celery")
    assert "paused" in paused.stdout, paused.output
    assert steps.app.paused_queues() == ["celery"]
    resumed = run("-A", "proj", "control", "add_consumer", "celery")
    assert "resumed" in resumed.stdout, resumed.output
    assert steps.app.paused_queues() == []
    assert tasks.mul.delay(3, 3).get(timeout=60) == 9

    # A queue no worker serves keeps its jobs pending: reserved; a countdown: scheduled.
    held = tasks.mul.apply_async((3, 3), queue="parked")
    scheduled = tasks.xsum.apply_async(([1, 2],), countdown=3600)
    reserved = json.loads(run("-A", "proj", "inspect", "reserved", "--json").stdout)
    assert [item["id"] for item in reserved["pgtasks"]] == [held.id]
    listed = json.loads(run("-A", "proj", "inspect", "scheduled", "--json").stdout)
    assert [item["request"]["id"] for item in listed["pgtasks"]] == [scheduled.id]
    assert held.state == states.PENDING

    revoked = run("-A", "proj", "control", "revoke", scheduled.id)
    assert f"{scheduled.id}: cancelled" in revoked.stdout, revoked.output
    assert scheduled.state == states.REVOKED
    assert run("-A", "proj", "result", scheduled.id).stdout.strip() == states.REVOKED

    # Any task, declared with a rate or not (Celery's answer and wording).
    limited = run("-A", "proj", "control", "rate_limit", "proj.tasks.add", "10/s")
    assert limited.exit_code == 0, limited.output
    assert "new rate limit set successfully: proj.tasks.add 10/s" in limited.output

    later = tasks.add.apply_async((1, 1), countdown=3600)
    purged = run("-A", "proj", "purge", "--force")
    assert purged.exit_code == 0, purged.output
    assert later.state == states.PENDING  # the row is gone: Celery's answer for no result
    worker.stop()
