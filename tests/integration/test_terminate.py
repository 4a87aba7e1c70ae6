"""Terminating a running job (``cancel(terminate=True)``) with real workers, real pool
children and real signals: per executor, against a racing finish, and fenced against an
attempt that moved to another lease owner.

Tasks come from ``tests.apps.executor_app`` (spawned children import its ``app``).
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgtasks import App, JobStatus
from tests.apps.executor_app import Tasks, register_tasks
from tests.apps.worker_app import create_executions_table
from tests.support.inprocess import execute, finished, recorded_runs, running_worker, select
from tests.support.processes import RESCUE_BOUND, Processes, is_alive
from tests.support.waiting import wait_until

APP_PATH = "tests.apps.executor_app:app"


@pytest.fixture
def tasks(
    app: App, dsn: str, admin: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> Tasks:
    create_executions_table(admin, app.schema)
    monkeypatch.setenv("PGTASKS_DSN", dsn)
    monkeypatch.setenv("PGTASKS_TEST_SCHEMA", app.schema)
    return register_tasks(app)


def _started(admin: psycopg.Connection[Any], app: App, job_id: int) -> int:
    """Wait until the job's code runs; the pid it runs in."""
    wait_until(lambda: recorded_runs(admin, app, job_id), message=f"job {job_id} to start")
    return recorded_runs(admin, app, job_id)[-1][1]


def test_terminate_kills_a_process_job_child_and_the_pool_replaces_it(
    app: App, tasks: Tasks, admin: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """The held job never checks its cancel flag: only the kill ends it."""
    with running_worker(app, app_path=APP_PATH, processes=1):
        job = tasks.hold.delay(str(tmp_path / "never"))
        child = _started(admin, app, job.id)
        result = app.cancel(job.id, terminate=True)
        assert (result.outcome, result.terminate) == ("requested", True)
        row = finished(job)
        wait_until(lambda: not is_alive(child), message="the terminated child to exit")
        follower = finished(tasks.pid.delay()).result

    assert row.status is JobStatus.CANCELLED
    assert row.last_error is not None
    assert row.last_error.startswith(f"Terminated: worker child {child} ")
    assert "signal 15 (SIGTERM)" in row.last_error
    assert follower != child, "a new child replaced the killed one"


def test_terminate_cancels_an_async_job_task(
    app: App, tasks: Tasks, admin: psycopg.Connection[Any], tmp_path: Path
) -> None:
    with running_worker(app, app_path=APP_PATH):
        job = tasks.async_hold.delay(str(tmp_path / "never"))
        _started(admin, app, job.id)
        assert app.cancel(job.id, terminate=True).outcome == "requested"
        row = finished(job)

    assert row.status is JobStatus.CANCELLED
    assert row.last_error == "Terminated: its task was cancelled on request"


def test_terminate_of_a_thread_job_only_flags_it(
    app: App, tasks: Tasks, admin: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """A thread cannot be killed: the job runs on until its code returns, then ends
    cancelled (its cancellation was requested)."""
    release = tmp_path / "release"
    with running_worker(app, app_path=APP_PATH):
        job = tasks.thread_hold.delay(str(release))
        _started(admin, app, job.id)
        result = app.cancel(job.id, terminate=True)
        assert "a thread cannot be killed" in str(result)
        wait_until(
            lambda: (
                select(
                    admin, app, "SELECT cancel_requested FROM {schema}.jobs WHERE id = %s", [job.id]
                )
                == [(True,)]
            ),
            message="the request to be stored",
        )
        assert job.status() is JobStatus.RUNNING
        release.touch()
        row = finished(job)

    assert row.status is JobStatus.CANCELLED
    assert row.result is None


def test_terminate_racing_the_finish_of_its_job_kills_nothing_else(
    app: App, tasks: Tasks, admin: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """The job ends once, done or cancelled; a termination that arrives after the job
    finished touches neither the child (which ran on) nor its next job."""
    endings = []
    with running_worker(app, app_path=APP_PATH, processes=1):
        for round_number in range(4):
            release = tmp_path / f"release-{round_number}"
            job = tasks.hold.delay(str(release))
            child = _started(admin, app, job.id)
            release.touch()
            result = app.cancel(job.id, terminate=True)
            row = finished(job)
            endings.append(row.status)
            if result.outcome == "already_finished":
                assert row.status is JobStatus.DONE
                assert is_alive(child), "a termination after the finish killed the child"
            else:
                assert row.status is JobStatus.CANCELLED
            follower = tasks.pid.delay()
            assert finished(follower).status is JobStatus.DONE
    assert set(endings) <= {JobStatus.DONE, JobStatus.CANCELLED}


def test_terminate_requested_for_an_attempt_that_moved_to_another_owner_kills_nothing(
    app: App, tasks: Tasks, admin: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """The request names the lease owner and attempt of its moment. Here the job moves to
    another worker (a rescue and a claim there: attempt 2) in the transaction of the
    request: the first worker, which still runs attempt 1, leaves its child alone (the
    next termination, of another job, shows that it read the request)."""
    with running_worker(app, app_path=APP_PATH, processes=2) as worker:
        moved = tasks.hold.delay(str(tmp_path / "never-1"))
        probe = tasks.hold.delay(str(tmp_path / "never-2"))
        moved_child = _started(admin, app, moved.id)
        _started(admin, app, probe.id)
        other = worker.worker_id + 1000
        with psycopg.connect(app.database.dsn) as conn:
            assert app.queries.cancel_job(conn, moved.id, terminate=True) is not None
            execute(
                conn,
                app,
                "UPDATE {schema}.jobs SET locked_by = %s, attempts = attempts + 1 WHERE id = %s",
                [other, moved.id],
            )
        app.cancel(probe.id, terminate=True)
        assert finished(probe).status is JobStatus.CANCELLED
        assert worker.running_jobs >= 1
        assert is_alive(moved_child), "the attempt that moved was killed"
        [(status, owner)] = select(
            admin, app, "SELECT status, locked_by FROM {schema}.jobs WHERE id = %s", [moved.id]
        )
        assert (status, owner) == ("running", other)
        (tmp_path / "never-1").touch()  # attempt 1 ends; its write is fenced out
        wait_until(lambda: worker.running_jobs == 0, message="attempt 1 to end")
    [(status, owner)] = select(
        admin, app, "SELECT status, locked_by FROM {schema}.jobs WHERE id = %s", [moved.id]
    )
    assert (status, owner) == ("running", other)


def test_jobs_cancel_terminate_on_the_command_line(
    app: App, tasks: Tasks, admin: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from pgtasks.cli import main

    with running_worker(app, app_path=APP_PATH, processes=1):
        job = tasks.hold.delay(str(tmp_path / "never"))
        _started(admin, app, job.id)
        result = CliRunner().invoke(
            main, ["jobs", "cancel", str(job.id), "--terminate", "-A", APP_PATH]
        )
        assert result.exit_code == 0, result.output
        assert f"job {job.id} is running: termination requested;" in result.output
        assert "a thread cannot be killed" in result.output
        row = finished(job)
    assert row.status is JobStatus.CANCELLED
    assert row.last_error is not None and row.last_error.startswith("Terminated:")


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(
    app: App, tasks: Tasks, admin: psycopg.Connection[Any], tmp_path: Path
) -> None:
    with running_worker(app, app_path=APP_PATH, processes=1):
        job = tasks.stubborn_hold.delay(str(tmp_path / "never"))
        child = _started(admin, app, job.id)
        app.cancel(job.id, terminate=True)
        row = finished(job)
        follower = finished(tasks.pid.delay()).result

    assert row.status is JobStatus.CANCELLED
    assert row.last_error is not None
    assert row.last_error.startswith(f"Terminated: worker child {child} ")
    assert "signal 9 (SIGKILL)" in row.last_error
    assert follower != child


def test_terminate_of_a_stalled_workers_attempt_after_a_real_rescue_kills_nothing(
    app: App, tasks: Tasks, admin: psycopg.Connection[Any], dsn: str, tmp_path: Path
) -> None:
    """Worker A (a ``pgtasks worker`` process, process pool) runs attempt 1 and is
    SIGSTOPped past its lease; worker B rescues the job and runs attempt 2 in its own
    child. The termination request then names A's attempt, as a request made while A
    held the job names it (the rescue of a job whose cancellation is requested would
    cancel it, so the request is written as of A's moment once B runs the job): B only
    flags its run and never kills it; A, resumed with SIGCONT, loses its lease and kills
    nothing of B's. The job ends with B's outcome."""
    release = tmp_path / "release"
    processes = Processes(tmp_path, APP_PATH)
    try:
        stalled = processes.worker(dsn, app.schema, "--processes=1", "--concurrency=1")
        stalled_id = stalled.worker_id()
        job = tasks.hold.delay(str(release))
        first_child = _started(admin, app, job.id)
        stalled.send(signal.SIGSTOP)
        with running_worker(
            app, app_path=APP_PATH, processes=2, heartbeat_interval=0.3, rescue_interval=0.3
        ) as rescuer:
            wait_until(
                lambda: len(recorded_runs(admin, app, job.id)) == 2,
                timeout=RESCUE_BOUND + 10,
                message="worker B to rescue and run the job",
            )
            runs = recorded_runs(admin, app, job.id)
            assert [attempt for attempt, _ in runs] == [1, 2]
            second_child = runs[1][1]
            [(owner, attempts)] = select(
                admin, app, "SELECT locked_by, attempts FROM {schema}.jobs WHERE id = %s", [job.id]
            )
            assert (owner, attempts) == (rescuer.worker_id, 2)
            execute(
                admin,
                app,
                "UPDATE {schema}.jobs SET cancel_requested = true, meta = meta ||"
                " jsonb_build_object('pgtasks.terminate', jsonb_build_object('attempt', 1,"
                " 'worker_id', %s::bigint, 'requested_at', now())) WHERE id = %s",
                [stalled_id, job.id],
            )
            # B reads every cancel request of its jobs at once: the termination of
            # another job of B's ending shows that it has read the stale one too.
            witness = tasks.hold.delay(str(tmp_path / "never"))
            _started(admin, app, witness.id)
            app.cancel(witness.id, terminate=True)
            assert finished(witness).status is JobStatus.CANCELLED
            stalled.send(signal.SIGCONT)
            stalled.wait_for_log("re-registered")
            assert is_alive(second_child), "worker B's run was killed"
            release.touch()
            row = finished(job)
            stalled.wait_for_log(f"job {job.id} executor_app.hold attempt 1: lease lost")
            rescuer_id = rescuer.worker_id
    finally:
        processes.close()
    # B's outcome: its run returned, and the flag it honoured made it a cancellation (a
    # cooperative one: no child was terminated).
    assert row.status is JobStatus.CANCELLED
    assert not (row.last_error or "").startswith("Terminated"), row.last_error
    assert row.attempts == 2
    assert first_child != second_child
    [(owner,)] = select(
        admin, app, "SELECT locked_by FROM {schema}.all_jobs WHERE id = %s", [job.id]
    )
    assert owner == rescuer_id, "the outcome written is not worker B's"
