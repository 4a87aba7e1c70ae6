"""The command line a Celery user's fingers know, as real subprocesses on a real PostgreSQL:
global options before or after the command, ``-l/--loglevel``, ``pgtasks call``,
``pgtasks purge``, ``pgtasks tasks list``, and ``jobs show``'s fields and attempt lines.
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from pgtasks import App, chain
from tests.apps.cli_app import BUILT
from tests.apps.ops_app import register_tasks as register_ops_tasks
from tests.support.cli import CLI_APP_PATH, Cli, Connection, cli_runner
from tests.support.inprocess import execute, select
from tests.support.population import insert_job

pytestmark = pytest.mark.acceptance


@pytest.fixture
def celery(ops_app: App) -> Cli:
    """``pgtasks ... -A tests.apps.cli_app:app`` on the test's schema."""
    return cli_runner(ops_app, CLI_APP_PATH)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def errors(result: subprocess.CompletedProcess[str]) -> list[str]:
    """stderr without the line the app logs when it is built."""
    return [line for line in result.stderr.splitlines() if line != BUILT]


def jobs_of(conn: Connection, app: App) -> list[tuple[Any, ...]]:
    return select(
        conn,
        app,
        "SELECT id, task_name, queue, status, args, kwargs, priority, idempotency_key,"
        " round(extract(epoch FROM run_at - created_at)) FROM {schema}.all_jobs ORDER BY id",
    )


# -- global options before or after the command ---------------------------------------------------
@pytest.mark.parametrize(
    "arguments",
    [
        ("stats",),
        ("jobs", "list"),
        ("queues", "list"),
        ("workers",),
        ("tasks", "list"),
        ("tasks", "list", "--json"),
    ],
)
def test_the_app_option_goes_before_or_after_the_command(
    celery: Cli, arguments: tuple[str, ...]
) -> None:
    after = ok(celery(*arguments))
    before = ok(celery("-A", CLI_APP_PATH, *arguments, app_option=False))
    long_before = ok(celery(f"--app={CLI_APP_PATH}", *arguments, app_option=False))
    from_env = ok(celery(*arguments, app_option=False, env_extra={"PGTASKS_APP": CLI_APP_PATH}))

    def stable(text: str) -> str:  # stats prints the time it read
        return "\n".join(line for line in text.splitlines() if not line.startswith("at "))

    assert stable(before) == stable(after) == stable(long_before) == stable(from_env)


def test_after_the_command_wins_over_before_it_which_wins_over_pgtasks_app(
    celery: Cli,
) -> None:
    env = {"PGTASKS_APP": "no.such.module:app"}
    before = celery("-A", CLI_APP_PATH, "tasks", "list", app_option=False, env_extra=env)
    after = celery("-A", "no.such:app", "tasks", "list", "-A", CLI_APP_PATH, app_option=False)
    wrong_after = celery("-A", CLI_APP_PATH, "tasks", "list", "-A", "no.such:app", app_option=False)

    assert "cli_app.send_email" in ok(before)
    assert "cli_app.send_email" in ok(after)
    assert wrong_after.returncode == 2
    assert "cannot import 'no.such'" in wrong_after.stderr


@pytest.mark.parametrize("arguments", [("tasks", "list"), ("call", "cli_app.digest"), ("purge",)])
def test_no_app_anywhere_is_a_usage_error(celery: Cli, arguments: tuple[str, ...]) -> None:
    result = celery(*arguments, app_option=False)

    assert result.returncode == 2
    assert "Missing option '-A' / '--app'" in result.stderr


@pytest.mark.parametrize(
    ("before", "after", "shown"),
    [
        ((), (), True),  # not configured: Python's last resort prints warnings
        (("-l", "error"), (), False),
        ((), ("--loglevel", "ERROR"), False),
        ((), ("--log-level", "error"), False),
        (("-l", "error"), ("-l", "warning"), True),  # after the command wins
    ],
)
def test_log_level_before_or_after_any_command(
    celery: Cli, before: tuple[str, ...], after: tuple[str, ...], shown: bool
) -> None:
    for command in (("tasks", "list"), ("migrate",)):
        result = celery(*before, *command, *after)
        assert result.returncode == 0, result.stderr
        assert (BUILT in result.stderr) is shown, (command, result.stderr)


@pytest.mark.parametrize("where", ["before", "after"])
def test_log_format_json_before_or_after_the_command(celery: Cli, where: str) -> None:
    option = ("--log-format", "json")
    arguments = (*option, "tasks", "list") if where == "before" else ("tasks", "list", *option)

    result = celery(*arguments)

    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stderr.splitlines()]
    assert [(r["level"], r["message"]) for r in records] == [("WARNING", BUILT)]


def test_a_bad_log_level_is_a_usage_error_naming_the_choices(celery: Cli) -> None:
    result = celery("-l", "loud", "tasks", "list")

    assert result.returncode == 2
    assert "'loud' is not one of 'debug', 'info', 'warning', 'error', 'critical'" in result.stderr


# -- call ----------------------------------------------------------------------------------------
def test_call_enqueues_and_prints_the_job_id(ops_app: App, conn: Connection, celery: Cli) -> None:
    first = ok(celery("call", "cli_app.send_email", "--args", '["a@example.com"]'))
    second = ok(
        celery(
            "call",
            "cli_app.send_email",
            "-k",
            '{"to": "b@example.com", "subject": "welcome"}',
            "--queue",
            "bulk",
            "--countdown",
            "120",
            "--priority",
            "7",
        )
    )
    eta = (datetime.now(timezone.utc) + timedelta(hours=1)).replace(microsecond=0)
    third = json.loads(
        ok(
            celery(
                "call",
                "cli_app.sync_account",
                "-a",
                "[42]",
                "--eta",
                eta.isoformat().replace("+00:00", "Z"),
                "--json",
            )
        )
    )

    rows = jobs_of(conn, ops_app)
    assert first == f"{rows[0][0]}\n" and second == f"{rows[1][0]}\n"
    assert rows[0][1:8] == (
        "cli_app.send_email",
        "emails",
        "pending",
        ["a@example.com"],
        {},
        0,
        None,
    )
    assert -1 <= rows[0][8] <= 0
    assert rows[1][2:8] == (
        "bulk",
        "pending",
        [],
        {"to": "b@example.com", "subject": "welcome"},
        7,
        None,
    )
    assert 115 <= rows[1][8] <= 120
    assert third == {
        "id": rows[2][0],
        "task": "cli_app.sync_account",
        "queue": "default",
        "existed": False,
    }
    assert 3590 <= rows[2][8] <= 3600


def test_call_with_an_idempotency_key_prints_the_existing_job(
    ops_app: App, conn: Connection, celery: Cli
) -> None:
    arguments = ("call", "cli_app.send_email", "-a", '["a@x"]', "--idempotency-key", "k:1")
    first = celery(*arguments)
    again = celery(*arguments)

    assert ok(first) == ok(again)
    assert f"a job with idempotency key k:1 exists: job {first.stdout.strip()}" in again.stderr
    assert len(jobs_of(conn, ops_app)) == 1


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("-a", "[1,"), "Invalid value for '-a' / '--args': not JSON"),
        (("-a", '{"to": 1}'), "must be a JSON array"),
        (("-k", "[1]"), "must be a JSON object"),
        (("-a", "[1, 2, 3]"), "arguments do not match task 'cli_app.send_email'"),
        (("-k", '{"nope": 1}'), "arguments do not match task 'cli_app.send_email'"),
        (("-a", '["a"]', "--eta", "2030-01-01T09:00:00"), "has no time zone"),
        (("-a", '["a"]', "--eta", "tomorrow"), "is not an ISO 8601 date and time"),
        (("-a", '["a"]', "--countdown", "5", "--eta", "2030-01-01T09:00:00Z"), "not both"),
        (("-a", '["a"]', "--countdown", "-5"), "Invalid value for '--countdown'"),
        (("-a", '["a"]', "--queue", "q" * 201), "Invalid value for '--queue'"),
    ],
)
def test_call_with_bad_input_is_a_usage_error_and_writes_nothing(
    ops_app: App, conn: Connection, celery: Cli, arguments: tuple[str, ...], message: str
) -> None:
    result = celery("call", "cli_app.send_email", *arguments)

    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert jobs_of(conn, ops_app) == []


def test_call_of_an_unknown_task_exits_1_naming_the_known_ones(
    ops_app: App, conn: Connection, celery: Cli
) -> None:
    result = celery("call", "cli_app.nope")

    assert result.returncode == 1
    assert errors(result)[0].startswith("error: no task named 'cli_app.nope' is registered")
    assert "cli_app.send_email" in result.stderr
    assert jobs_of(conn, ops_app) == []


def test_call_on_a_database_that_is_down_or_unmigrated_exits_1_with_one_line(
    make_app: Any, celery: Cli
) -> None:
    unmigrated = make_app(migrate=False)
    down = celery(
        "call",
        "cli_app.send_email",
        "-a",
        '["a"]',
        env_extra={"PGTASKS_DSN": "postgresql://pgtasks@127.0.0.1:9/nowhere?connect_timeout=1"},
    )
    missing = celery(
        "call",
        "cli_app.send_email",
        "-a",
        '["a"]',
        env_extra={"PGTASKS_TEST_SCHEMA": unmigrated.schema},
    )

    assert down.returncode == 1, down.stderr
    assert errors(down)[-1].startswith("error: cannot reach PostgreSQL at 127.0.0.1:9/nowhere")
    assert "Traceback" not in down.stderr
    assert missing.returncode == 1, missing.stderr
    assert "pgtasks migrate" in missing.stderr and "Traceback" not in missing.stderr


# -- purge ---------------------------------------------------------------------------------------
def populate(conn: Connection, app: App) -> dict[str, int]:
    return {
        "default": insert_job(conn, app, task="cli_app.digest"),
        "scheduled": insert_job(conn, app, task="cli_app.digest", run_in=3600),
        "emails": insert_job(conn, app, task="cli_app.send_email", queue="emails"),
        "emails other task": insert_job(conn, app, task="cli_app.other", queue="emails"),
        "running": insert_job(conn, app, task="cli_app.digest", status="running", attempts=1),
        "done": insert_job(conn, app, task="cli_app.digest", status="done", finished_ago=5),
        "failed": insert_job(conn, app, status="failed", finished_ago=5, queue="emails"),
    }


def remaining(conn: Connection, app: App) -> set[int]:
    return {row[0] for row in select(conn, app, "SELECT id FROM {schema}.all_jobs")}


def test_purge_with_yes_deletes_only_pending_jobs_of_the_filter(
    ops_app: App, conn: Connection, celery: Cli
) -> None:
    rows = populate(conn, ops_app)

    by_both = ok(celery("purge", "--queue", "emails", "--task", "cli_app.send_email", "--yes"))
    assert by_both == "purged 1 pending job(s) of queue emails and of task cli_app.send_email\n"
    assert rows["emails"] not in remaining(conn, ops_app)

    by_queue = json.loads(ok(celery("purge", "--queue", "default", "-y", "--json")))
    assert by_queue == {"deleted": 2, "queue": "default", "task": None, "workflow_jobs_left": 0}

    everything = ok(celery("purge", "--force"))
    assert everything == "purged 1 pending job(s)\n"
    assert remaining(conn, ops_app) == {rows["running"], rows["done"], rows["failed"]}


def test_purge_asks_first_and_deletes_nothing_unless_told_yes(
    ops_app: App, conn: Connection, celery: Cli
) -> None:
    rows = populate(conn, ops_app)
    pending = {rows["default"], rows["scheduled"], rows["emails"], rows["emails other task"]}

    for answer in ("n\n", "", "whatever\nno\n"):
        refused = celery("purge", input=answer)
        assert refused.returncode == 1, refused.stderr
        assert "Delete 4 pending job(s)? There is no undo. [y/N]" in refused.stderr
        assert "nothing deleted (pass --yes to delete without asking)" in refused.stderr
        assert pending <= remaining(conn, ops_app)

    confirmed = celery("purge", "--queue", "emails", input="y\n")

    assert ok(confirmed) == "purged 2 pending job(s) of queue emails\n"
    assert "Delete 2 pending job(s) of queue emails?" in confirmed.stderr
    assert remaining(conn, ops_app) == {
        rows[name] for name in ("default", "scheduled", "running", "done", "failed")
    }


def test_purge_with_nothing_pending_asks_nothing(ops_app: App, celery: Cli) -> None:
    result = celery("purge", "--queue", "nope")

    assert ok(result) == "purged 0 pending job(s) of queue nope\n"
    assert errors(result) == []


def test_purge_leaves_workflow_steps_and_says_so(
    ops_app: App, conn: Connection, celery: Cli
) -> None:
    register_ops_tasks(ops_app)
    add = ops_app.get_task("ops_app.add")
    workflow = chain(add.s(1, 2), add.s(3)).delay()
    plain = add.delay(5, 6)

    result = celery("purge", "--yes")

    assert ok(result) == (
        "purged 1 pending job(s)\n"
        "left 1 pending step(s) of workflows: cancel a workflow with pgtasks workflows cancel ID\n"
    )
    assert plain.id not in remaining(conn, ops_app)
    assert len(remaining(conn, ops_app)) == 2  # the chain's pending and waiting steps
    assert workflow.status == "running"


def test_purge_keeps_jobs_enqueued_after_the_count(ops_app: App, conn: Connection) -> None:
    """Between the count the operator confirmed and the delete, new jobs may arrive."""
    before = insert_job(conn, ops_app, task="cli_app.digest")
    count = ops_app.admin.count_purgeable(None, None)
    after = insert_job(conn, ops_app, task="cli_app.digest")

    deleted = ops_app.admin.purge_jobs(None, None, count.max_id)

    assert (count.jobs, deleted) == (1, 1)
    assert remaining(conn, ops_app) == {after}
    assert before not in remaining(conn, ops_app)


def test_purge_skips_a_job_a_worker_is_claiming(ops_app: App, conn: Connection) -> None:
    import psycopg

    claimed = insert_job(conn, ops_app, task="cli_app.digest")
    other = insert_job(conn, ops_app, task="cli_app.digest")
    count = ops_app.admin.count_purgeable(None, None)
    with psycopg.connect(ops_app.dsn) as holder:
        execute(holder, ops_app, "SELECT 1 FROM {schema}.jobs WHERE id = %s FOR UPDATE", [claimed])

        deleted = ops_app.admin.purge_jobs(None, None, count.max_id)
        holder.rollback()

    assert deleted == 1
    assert remaining(conn, ops_app) == {claimed}
    assert other not in remaining(conn, ops_app)


# -- tasks list ----------------------------------------------------------------------------------
def test_tasks_list_shows_every_registered_task_with_its_options(celery: Cli) -> None:
    text = ok(celery("tasks", "list"))
    document = json.loads(ok(celery("tasks", "list", "--json")))

    lines = text.splitlines()
    assert lines[0].split() == [
        "TASK",
        "QUEUE",
        "PRIORITY",
        "ATTEMPTS",
        "BACKOFF",
        "TIMEOUT",
        "EXECUTOR",
        "LIMITS",
        "UNIQUE",
        "SCHEDULES",
    ]
    by_name = {line.split()[0]: line for line in lines[1:]}
    assert list(by_name) == ["cli_app.digest", "cli_app.send_email", "cli_app.sync_account"]
    assert by_name["cli_app.send_email"].split()[1:4] == ["emails", "0", "3"]
    sync = by_name["cli_app.sync_account"]
    assert "2.0s..1m" in sync and "jitter" not in sync
    assert "30s (soft 25s)" in sync
    assert "concurrency 1 per key, rate 10/s" in sync
    assert "while active" in sync
    assert (
        by_name["cli_app.digest"].endswith("cron '*/5 * * * *' UTC")
        and " per 1h " in by_name["cli_app.digest"]
    )

    tasks = {task["name"]: task for task in document["tasks"]}
    assert tasks["cli_app.sync_account"] == {
        "name": "cli_app.sync_account",
        "queue": "default",
        "priority": 5,
        "max_attempts": 5,
        "retry_backoff": 2.0,
        "retry_backoff_max": 60.0,
        "retry_jitter": False,
        "dont_retry": [],
        "timeout": 30.0,
        "soft_timeout": 25.0,
        "executor": None,
        "concurrency": 1,
        "concurrency_per_key": True,
        "rate_limit": "10/s",
        "unique": {"scope": "active", "period": None, "key": "computed"},
        "schedules": [],
    }
    assert tasks["cli_app.digest"]["unique"] == {
        "scope": "period",
        "period": 3600.0,
        "key": "computed",
    }
    assert [s["name"] for s in tasks["cli_app.digest"]["schedules"]] == [
        "cli_app.digest@*/5 * * * *"
    ]


def test_tasks_list_needs_no_database(celery: Cli) -> None:
    result = celery("tasks", "list", env_extra={"PGTASKS_DSN": "postgresql://x@127.0.0.1:9/db"})

    assert "cli_app.send_email" in ok(result)


# -- jobs show -----------------------------------------------------------------------------------
ATTEMPTS = [
    {
        "attempt": 1,
        "worker_id": 7,
        "error": 'Traceback (most recent call last):\n  File "x.py", line 1\nRuntimeError: boom',
        "exception_type": "builtins.RuntimeError",
        "finished_at": "2026-01-01T00:00:00+00:00",
    },
    {
        "attempt": 2,
        "worker_id": 8,
        "error": "the worker was lost",
        "exception_type": "pgtasks.WorkerLostError",
        "finished_at": "2026-01-01T00:01:00+00:00",
    },
]


def test_jobs_show_names_an_attempts_error_type_once_and_the_workflow_among_the_fields(
    ops_app: App, conn: Connection, cli: Cli
) -> None:
    register_ops_tasks(ops_app)
    add = ops_app.get_task("ops_app.add")
    workflow = chain(add.s(1, 2), add.s(3)).delay()
    job_id = ops_app.get_workflow(workflow.id)["jobs"][0]["id"]
    execute(
        conn,
        ops_app,
        "UPDATE {schema}.jobs SET attempt_errors = %(history)s::jsonb,"
        " last_error = 'RuntimeError: boom' WHERE id = %(id)s",
        {"history": json.dumps(ATTEMPTS), "id": job_id},
    )

    text = ok(cli("jobs", "show", str(job_id)))

    lines = text.splitlines()
    heading = lines.index("failed attempts:")
    workflow_line = next(i for i, line in enumerate(lines) if line.startswith("  workflow:"))
    assert workflow_line < heading
    assert lines[workflow_line].split()[:4] == ["workflow:", str(workflow.id), "(step", "0;"]
    assert lines[heading + 1].startswith("  #1 worker 7 2026-01-01 00:00:00")
    assert lines[heading + 1].endswith(" RuntimeError: boom")
    assert "builtins.RuntimeError" not in text
    assert lines[heading + 2].endswith(" WorkerLostError: the worker was lost")
    assert lines[heading + 3] == "last error:"
