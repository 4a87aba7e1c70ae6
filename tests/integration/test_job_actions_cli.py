"""Job actions outside the dashboard (pgtasks/_app/job_actions.py): ``pgtasks jobs
run-now|snooze|edit`` as subprocesses and ``App.run_jobs_now`` / ``job.run_now()``,
``job.snooze()``, ``job.edit()``; audited with who acted; bad input (an unknown id,
non-JSON, arguments that do not fit the task, a running job, a read-only or unmigrated
database) refused with one clear line and nothing changed."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgtasks import App, JobStatus
from pgtasks._app import controls
from pgtasks._app.handle import JobHandle
from pgtasks._errors import DatabaseError, JobNotFoundError, JobNotPendingError
from tests.apps.ops_app import register_tasks
from tests.support.cli import cli_runner
from tests.support.inprocess import running_worker, select
from tests.support.waiting import wait_until

MISSING = 987_654_321


def seconds_until_due(app: App, job_id: int) -> float:
    with app.connection() as conn:
        [(seconds,)] = select(
            conn,
            app,
            "SELECT extract(epoch FROM run_at - now())::float8 FROM {schema}.jobs WHERE id = %s",
            [job_id],
        )
    return float(seconds)


def audit(app: App) -> list[tuple[str, str, str]]:
    rows = controls.read_audit(app, prefix="job:", limit=100)
    return sorted((row["actor"], row["action"], row["target"]) for row in rows)


@pytest.fixture
def add(app: App) -> Any:
    register_tasks(app)
    return app.tasks["ops_app.add"]


def test_run_now_makes_scheduled_jobs_due_and_names_the_ones_it_left(app: App, add: Any) -> None:
    cli = cli_runner(app)
    later = [add.apply_async(args=[1, n], countdown=3600) for n in range(2)]
    due = add.delay(1, 2)
    ran = cli(
        "jobs",
        "run-now",
        *(str(job.id) for job in later),
        str(due.id),
        str(MISSING),
        "--who",
        "ops-oncall",
    )
    assert ran.returncode == 1, ran.stderr
    assert ran.stdout.strip() == f"2 job(s) due now: {later[0].id}, {later[1].id}"
    assert f"error: job {due.id} is due already: not due now" in ran.stderr
    assert f"error: job {MISSING} does not exist (it may have been pruned)" in ran.stderr
    assert all(seconds_until_due(app, job.id) <= 0 for job in later)
    assert audit(app) == sorted(("cli:ops-oncall", "run_now", f"job:{job.id}") for job in later)
    again = cli("jobs", "run-now", str(later[0].id), "--json")
    assert again.returncode == 1
    assert json.loads(again.stdout) == {
        "action": "run_now",
        "done": [],
        "left": {str(later[0].id): "is due already"},
    }


def test_run_now_all_scheduled_of_a_task(app: App, add: Any) -> None:
    cli = cli_runner(app)
    later = [add.apply_async(args=[2, n], countdown=600) for n in range(3)]
    other = app.tasks["ops_app.send_email"].apply_async(args=["a@example.com"], countdown=600)
    ran = cli("jobs", "run-now", "--all-scheduled", "--task", "ops_app.add")
    assert (ran.returncode, ran.stdout.strip()) == (0, "3 scheduled job(s) due now"), ran.stderr
    assert all(seconds_until_due(app, job.id) <= 0 for job in later)
    assert seconds_until_due(app, other.id) > 500
    assert cli("jobs", "run-now").returncode == 2
    assert cli("jobs", "run-now", "1", "--task", "ops_app.add").returncode == 2


def test_snooze_by_a_duration(app: App, add: Any) -> None:
    cli = cli_runner(app)
    job = add.delay(3, 4)
    snoozed = cli("jobs", "snooze", str(job.id), "--by", "1h")
    assert (snoozed.returncode, snoozed.stdout.strip()) == (0, f"1 job(s) snoozed: {job.id}")
    assert 3500 < seconds_until_due(app, job.id) <= 3600
    for bad in ("1y", "0", "-5m", "soon"):
        refused = cli("jobs", "snooze", str(job.id), "--by", bad)
        assert refused.returncode == 2 and "--by" in refused.stderr, (bad, refused.stderr)
    missing = cli("jobs", "snooze", str(MISSING), "--by", "10m")
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    assert 3500 < seconds_until_due(app, job.id) <= 3600


def test_edit_checks_the_arguments_against_the_task_and_keeps_what_is_not_given(
    app: App, add: Any
) -> None:
    cli = cli_runner(app)
    job = add.apply_async(args=[1, 2], countdown=3600)
    edited = cli("jobs", "edit", str(job.id), "--kwargs", '{"b": 40}', "--args", "[2]")
    assert (edited.returncode, edited.stdout.strip()) == (0, f"job {job.id}: arguments saved")
    row = job.fetch()
    assert (row.args, row.kwargs) == ([2], {"b": 40})
    kept = cli("jobs", "edit", str(job.id), "--args", "[5]", "--json")
    assert json.loads(kept.stdout) == {"id": job.id, "edited": True}
    assert (job.fetch().args, job.fetch().kwargs) == ([5], {"b": 40})

    mismatch = cli("jobs", "edit", str(job.id), "--kwargs", '{"nope": 1}')
    assert mismatch.returncode == 1
    assert "arguments do not match task 'ops_app.add'" in mismatch.stderr
    for option, text in (("--args", "[1,"), ("--args", '{"a": 1}'), ("--kwargs", "[1]")):
        refused = cli("jobs", "edit", str(job.id), option, text)
        assert refused.returncode == 2, refused.stderr
    assert cli("jobs", "edit", str(job.id)).returncode == 2
    missing = cli("jobs", "edit", str(MISSING), "--args", "[1, 2]")
    assert missing.returncode == 1
    assert f"job {MISSING} does not exist" in missing.stderr
    assert (job.fetch().args, job.fetch().kwargs) == ([5], {"b": 40})
    actions = [row[1] for row in audit(app)]
    assert actions == ["edit_arguments", "edit_arguments"]


def test_a_running_job_is_refused_by_every_action(app: App) -> None:
    release = threading.Event()

    @app.task(name="ops_app.hold")
    def hold(n: int) -> int:
        release.wait(30)
        return n

    cli = cli_runner(app)
    with running_worker(app):
        job = hold.delay(1)
        wait_until(lambda: job.status() is JobStatus.RUNNING, message="the job to start")
        for arguments in (("run-now",), ("snooze", "--by", "1m"), ("edit", "--args", "[2]")):
            refused = cli("jobs", arguments[0], str(job.id), *arguments[1:])
            assert refused.returncode == 1, (arguments, refused.stderr)
            assert "is running" in refused.stderr, refused.stderr
        with pytest.raises(JobNotPendingError, match="is running"):
            job.run_now()
        with pytest.raises(JobNotPendingError, match="is running"):
            job.snooze(timedelta(minutes=1))
        with pytest.raises(JobNotPendingError, match="already started"):
            job.edit(args=[2])
        release.set()
        assert job.get(timeout=30) == 1
    assert audit(app) == []


def test_the_handle_and_app_methods(app: App, add: Any) -> None:
    job = add.apply_async(args=[1, 1], countdown=3600)
    assert job.run_now() is True
    assert job.run_now() is False  # due already
    job.snooze(timedelta(hours=2), actor="api:tests")
    assert 7100 < seconds_until_due(app, job.id) <= 7200
    job.edit(kwargs={"b": 9}, args=[3])
    assert (job.fetch().args, job.fetch().kwargs) == ([3], {"b": 9})
    with pytest.raises(TypeError, match=r"arguments do not match task 'ops_app\.add'"):
        job.edit(kwargs={"c": 1})
    with pytest.raises(ValueError, match="snooze by a timedelta"):
        job.snooze("1h")  # type: ignore[arg-type]
    outcome = app.snooze_jobs([job.id, MISSING], 60)
    assert outcome.done == (job.id,)
    assert outcome.left == {MISSING: "does not exist (it may have been pruned)"}
    with pytest.raises(JobNotFoundError):
        JobHandle(app, MISSING).run_now()
    actors = {row[0] for row in audit(app)}
    assert "api:tests" in actors and len(actors) == 2


def test_an_unmigrated_or_read_only_database_is_refused(
    app: App, add: Any, make_app: Callable[..., App], dsn: str
) -> None:
    job = add.apply_async(args=[1, 1], countdown=3600)
    bare = make_app(migrate=False)
    refused = cli_runner(bare)("jobs", "run-now", str(job.id))
    assert refused.returncode == 1
    assert "not migrated" in refused.stderr or "pgtasks migrate" in refused.stderr, refused.stderr

    # A role whose transactions are read-only, as on a hot standby (a DSN's own options
    # give way to pgtasks' startup options, so the setting is the role's).
    role = f"readonly_{app.schema}"[:60]
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN SUPERUSER").format(sql.Identifier(role)))
        admin.execute(
            sql.SQL("ALTER ROLE {} SET default_transaction_read_only = on").format(
                sql.Identifier(role)
            )
        )
    read_only = make_conninfo(dsn, user=role)
    try:
        refuse_on_read_only(app, job, read_only, make_app)
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def refuse_on_read_only(app: App, job: Any, read_only: str, make_app: Callable[..., App]) -> None:
    for arguments in (("run-now",), ("snooze", "--by", "1m"), ("edit", "--args", "[2, 2]")):
        refused = cli_runner(app)(
            "jobs",
            arguments[0],
            str(job.id),
            *arguments[1:],
            env_extra={"PGTASKS_DSN": read_only},
        )
        assert refused.returncode == 1, refused.stderr
        assert "the database is read-only" in refused.stderr, refused.stderr
    reader = make_app(dsn=read_only, schema=app.schema, migrate=False)
    register_tasks(reader)
    with pytest.raises(DatabaseError, match="the database is read-only"):
        reader.get_job(job.id).run_now()
    assert seconds_until_due(app, job.id) > 3500
    assert (job.fetch().args, audit(app)) == ([1, 1], [])


def test_who_must_be_printable(app: App, add: Any) -> None:
    job = add.apply_async(args=[1, 1], countdown=3600)
    refused = cli_runner(app)("jobs", "run-now", str(job.id), "--who", "a\x1bb")
    assert refused.returncode == 2 and "--who" in refused.stderr
