"""``pgtasks stats|jobs|workers|prune`` as real subprocesses against a real PostgreSQL.

Each test writes a known population into its own schema, runs the command on
``tests.apps.ops_app:app`` and checks its text and ``--json`` output, its exit code and
what changed in the database.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import psycopg
import pytest

from pgtasks import App
from tests.apps.ops_app import LEASE_TIMEOUT
from tests.support.cli import Cli, Connection
from tests.support.inprocess import execute, select
from tests.support.population import DAY, insert_job, job_ids, register

pytestmark = pytest.mark.acceptance

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "tests/apps/ops_app.py", line 29, in send_email\n'
    '    raise ConnectionError(f"SMTP server refused {to}")\n'
    "ConnectionError: SMTP server refused a@example.com"
)


def populate(conn: Connection, app: App) -> dict[str, int]:
    """The demo population: two queues, every status, one live and one stopped worker."""
    live = register(conn, app, pid=101)
    stopped = register(conn, app, pid=102)
    app.queries.deregister_worker(conn, stopped)
    add: dict[str, Any] = {"task": "ops_app.add", "args": "[1, 2]"}
    email: dict[str, Any] = {
        "task": "ops_app.send_email",
        "queue": "emails",
        "args": '["a@example.com"]',
    }
    return {
        "live worker": live,
        "stopped worker": stopped,
        "pending": insert_job(conn, app, run_in=-90, **add),
        "pending 2": insert_job(conn, app, run_in=-10, **add),
        "scheduled": insert_job(conn, app, run_in=3600, **add),
        "running": insert_job(conn, app, status="running", locked_by=live, attempts=1, **add),
        "done old": insert_job(conn, app, status="done", finished_ago=2 * DAY, attempts=1, **add),
        "done recent": insert_job(conn, app, status="done", finished_ago=20, attempts=1, **add),
        "failed": insert_job(
            conn,
            app,
            status="failed",
            finished_ago=30,
            attempts=3,
            last_error=TRACEBACK,
            kwargs='{"subject": "welcome"}',
            **email,
        ),
        "failed old": insert_job(
            conn, app, status="failed", finished_ago=8 * DAY, attempts=3, **email
        ),
        "cancelled old": insert_job(conn, app, status="cancelled", finished_ago=8 * DAY, **email),
    }


def json_output(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# -- stats ----------------------------------------------------------------------------------------
def test_stats_prints_counts_per_queue_the_oldest_wait_recent_finishes_and_workers(
    ops_app: App, conn: Connection, cli: Cli
) -> None:
    populate(conn, ops_app)

    result = cli("stats")

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # WAITING (workflow steps) comes first; none here.
    rows = {line.split()[0]: line.split()[2:] for line in lines[2:5]}
    assert [line.split()[1] for line in lines[2:5]] == ["0", "0", "0"]
    # PENDING DUE RUNNING DONE FAILED CANCELLED OLDEST-DUE FINISHED-1M FINISHED-1H
    assert rows["default"][:6] == ["3", "2", "1", "2", "0", "0"]
    assert rows["default"][6].startswith("1m3")  # the job due 90 s ago
    assert rows["default"][7:] == ["1", "1"]
    assert rows["emails"] == ["0", "0", "0", "0", "2", "1", "-", "1", "1"]
    assert rows["(all)"][:6] == ["3", "2", "1", "2", "2", "1"]
    assert "workers: 1 live (lease 10s)" in lines
    assert (
        "guarantees exercised (since the schema was created): lease lost 0, rescued 0,"
        " fenced writes refused 0, enqueues deduplicated 0, released at shutdown 0,"
        " unknown task jobs 0, expired 0, steps checkpointed 0, steps replayed 0,"
        " enqueues debounced 0, batches run 0, batch jobs 0"
    ) in lines
    assert "parked (pending, no slot or attempt held): none" in lines


def test_stats_json_counts_a_row_another_transaction_holds_locked(
    ops_app: App, conn: Connection, cli: Cli
) -> None:
    rows = populate(conn, ops_app)
    with psycopg.connect(ops_app.dsn) as holder:
        for name in ("pending", "running"):
            execute(
                holder,
                ops_app,
                "SELECT 1 FROM {schema}.jobs WHERE id = %s FOR UPDATE",
                [rows[name]],
            )

        document = json_output(cli("stats", "--json"))
        holder.rollback()

    default = document["queues"]["default"]
    assert (default["pending"], default["due"], default["scheduled"]) == (3, 2, 1)
    assert (default["running"], default["done"]) == (1, 2)
    assert 85 < default["oldest_due_age"] < 120
    assert document["queues"]["emails"]["failed"] == 2
    assert document["total"]["total"] == 9
    assert document["workers"] == {"live": 1, "silent": 0, "lease_timeout": LEASE_TIMEOUT}
    assert document["counters"] == {
        "lease_lost": 0,
        "rescued": 0,
        "fenced_writes_refused": 0,
        "enqueues_deduplicated": 0,
        "released_at_shutdown": 0,
        "unknown_task_jobs": 0,
        "expired": 0,
        "steps_checkpointed": 0,
        "steps_replayed": 0,
        "enqueues_debounced": 0,
        "batches_run": 0,
        "batch_jobs": 0,
    }
    assert document["parked"] == {}


# -- jobs -----------------------------------------------------------------------------------------
def test_jobs_list_prints_the_newest_matching_jobs_with_their_last_error(
    ops_app: App, conn: Connection, cli: Cli
) -> None:
    rows = populate(conn, ops_app)

    result = cli("jobs", "list", "--status", "failed")
    limited = json_output(cli("jobs", "list", "--queue", "default", "--limit", "2", "--json"))

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:5] == ["ID", "TASK", "QUEUE", "STATUS", "ATTEMPTS"]
    assert [int(line.split()[0]) for line in lines[1:]] == [rows["failed old"], rows["failed"]]
    assert lines[2].endswith("ConnectionError: SMTP server refused a@example.com")
    assert [job["id"] for job in limited] == [rows["done recent"], rows["done old"]]
    assert limited[0]["args"] == [1, 2] and limited[0]["status"] == "done"


def test_jobs_list_with_no_match_says_so(ops_app: App, conn: Connection, cli: Cli) -> None:
    populate(conn, ops_app)

    result = cli("jobs", "list", "--task", "nope")

    assert (result.returncode, result.stdout) == (0, "no jobs\n")
    assert json_output(cli("jobs", "list", "--task", "nope", "--json")) == []


def test_jobs_show_prints_every_field_and_the_traceback(
    ops_app: App, conn: Connection, cli: Cli
) -> None:
    rows = populate(conn, ops_app)

    result = cli("jobs", "show", str(rows["failed"]))
    document = json_output(cli("jobs", "show", str(rows["failed"]), "--json"))

    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert text.startswith(f"job {rows['failed']}\n  task:            ops_app.send_email\n")
    assert '  args:            ["a@example.com"]\n' in text
    assert '  kwargs:          {"subject": "welcome"}\n' in text
    assert "  attempts:        3 of 3\n" in text
    assert text.endswith(
        "last error:\n" + "\n".join(f"  {line}" for line in TRACEBACK.splitlines()) + "\n"
    )
    assert document["last_error"] == TRACEBACK
    assert document["kwargs"] == {"subject": "welcome"}
    assert (document["status"], document["attempts"], document["max_attempts"]) == ("failed", 3, 3)


def test_jobs_retry_puts_a_failed_job_back_to_pending_with_one_more_attempt(
    ops_app: App, conn: Connection, cli: Cli
) -> None:
    rows = populate(conn, ops_app)

    result = cli("jobs", "retry", str(rows["failed"]))
    document = json_output(cli("jobs", "retry", str(rows["cancelled old"]), "--json"))

    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"job {rows['failed']} retried: failed -> pending, due now"
        " (3 attempt(s) so far, max_attempts 4)\n"
    )
    assert document == {
        "id": rows["cancelled old"],
        "retried": True,
        "previous_status": "cancelled",
        "status": "pending",
        "attempts": 0,
        "max_attempts": 3,
    }
    states = select(
        conn,
        ops_app,
        "SELECT status, attempts, max_attempts, run_at <= now(), finished_at IS NULL"
        " FROM {schema}.all_jobs WHERE id = %s",
        [rows["failed"]],
    )
    assert states == [("pending", 3, 4, True, True)]


def test_jobs_retry_all_failed_of_one_task(ops_app: App, conn: Connection, cli: Cli) -> None:
    rows = populate(conn, ops_app)
    other = insert_job(conn, ops_app, task="ops_app.add", status="failed", finished_ago=5)

    result = cli("jobs", "retry", "--all-failed", "--task", "ops_app.send_email")
    document = json_output(cli("jobs", "retry", "--all-failed", "--json"))

    assert result.returncode == 0, result.stderr
    ids = sorted([rows["failed"], rows["failed old"]])
    assert result.stdout == (
        f"retried 2 failed job(s) of task ops_app.send_email: {ids[0]}, {ids[1]}\n"
    )
    assert document == {"retried": 1, "ids": [other], "task": None}


def test_jobs_retry_of_a_job_that_did_not_fail_exits_1_with_one_line(
    ops_app: App, conn: Connection, cli: Cli
) -> None:
    rows = populate(conn, ops_app)

    result = cli("jobs", "retry", str(rows["done recent"]))

    assert result.returncode == 1
    assert result.stderr == (
        f"error: job {rows['done recent']} is done: only failed or cancelled jobs can be retried\n"
    )


@pytest.mark.parametrize(
    "arguments",
    [
        ("jobs", "retry"),
        ("jobs", "retry", "1", "--all-failed"),
        ("jobs", "retry", "1", "--task", "x"),
        ("jobs", "retry", "--all-failed", "--keep-steps"),
    ],
)
def test_jobs_retry_needs_an_id_or_all_failed(cli: Cli, arguments: tuple[str, ...]) -> None:
    result = cli(*arguments)

    assert result.returncode == 2
    assert "Error:" in result.stderr


@pytest.mark.skipif(not hasattr(App, "cancel"), reason="App.cancel is not implemented yet")
def test_jobs_cancel_cancels_a_pending_job_and_says_a_finished_one_is_finished(
    ops_app: App, conn: Connection, cli: Cli
) -> None:
    rows = populate(conn, ops_app)

    first = cli("jobs", "cancel", str(rows["pending"]))
    again = json_output(cli("jobs", "cancel", str(rows["pending"]), "--json"))
    done = cli("jobs", "cancel", str(rows["done recent"]))

    assert first.returncode == 0, first.stderr
    assert first.stdout == f"job {rows['pending']} cancelled: it was pending and will not run\n"
    assert again == {"id": rows["pending"], "outcome": "already_finished", "status": "cancelled"}
    assert done.returncode == 0
    assert done.stdout == f"job {rows['done recent']} already finished (done): nothing to cancel\n"


@pytest.mark.parametrize("command", ["show", "retry", "cancel"])
def test_jobs_command_on_a_missing_id_exits_1_with_one_line(
    ops_app: App, cli: Cli, command: str
) -> None:
    if command == "cancel" and not hasattr(App, "cancel"):
        pytest.skip("App.cancel is not implemented yet")

    result = cli("jobs", command, "987654")

    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == "error: job 987654 does not exist (it may have been pruned)\n"


# -- workers --------------------------------------------------------------------------------------
def test_workers_lists_live_and_recently_removed_workers_with_running_jobs(
    ops_app: App, conn: Connection, cli: Cli
) -> None:
    rows = populate(conn, ops_app)

    result = cli("workers")
    document = json_output(cli("workers", "--json"))

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "ID",
        "STATE",
        "HOST:PID",
        "QUEUES",
        "BUSY",
        "HEARTBEAT",
        "REMOVED",
        "RUNNING",
        "JOBS",
    ]
    live, stopped = lines[1].split(), lines[2].split()
    assert live[:5] == [str(rows["live worker"]), "live", "host:101", "*", "1/4"]
    assert live[-1] == str(rows["running"])
    assert stopped[:5] == [str(rows["stopped worker"]), "stopped", "host:102", "*", "0/4"]
    assert document["lease_timeout"] == LEASE_TIMEOUT
    states = {worker["id"]: worker for worker in document["workers"]}
    assert states[rows["live worker"]]["running_job_ids"] == [rows["running"]]
    assert states[rows["live worker"]]["removed_at"] is None
    assert states[rows["stopped worker"]]["state"] == "stopped"
    assert states[rows["stopped worker"]]["removed_at"] is not None
    # What runs where: each running job with its worker, host, task and attempt.
    header = lines.index(next(line for line in lines if line.startswith("WORKER")))
    assert lines[header].split()[:6] == ["WORKER", "HOST:PID", "JOB", "TASK", "ATTEMPT", "RUNTIME"]
    assert lines[header + 1].split()[:5] == [
        str(rows["live worker"]),
        "host:101",
        str(rows["running"]),
        "ops_app.add",
        "1/3",
    ]
    [running] = document["running"]
    assert (running["id"], running["worker_id"]) == (rows["running"], rows["live worker"])
    assert (running["hostname"], running["pid"], running["attempt"]) == ("host", 101, 1)
    assert running["args"] == "[1, 2]"


# -- prune ----------------------------------------------------------------------------------------
def test_prune_deletes_finished_jobs_past_retention_and_prints_counts(
    ops_app: App, conn: Connection, cli: Cli
) -> None:
    rows = populate(conn, ops_app)

    result = cli("prune", "--batch-size", "1")
    again = json_output(cli("prune", "--json", "--failed-older-than", "10s"))

    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "pruned 3 finished job(s): done 1, failed 1, cancelled 1"
        " (retention: done 1d, failed and cancelled 7d)\n"
    )
    assert again["deleted"] == {"done": 0, "failed": 1, "cancelled": 0}
    assert (again["done_older_than"], again["failed_older_than"]) == (DAY, 10.0)
    assert job_ids(conn, ops_app) == {
        rows[name] for name in ("pending", "pending 2", "scheduled", "running", "done recent")
    }


def test_prune_never_keeps_a_kind_and_zero_deletes_all_finished_of_it(
    ops_app: App, conn: Connection, cli: Cli
) -> None:
    rows = populate(conn, ops_app)

    document = json_output(
        cli("prune", "--done-older-than", "0", "--failed-older-than", "never", "--json")
    )

    assert document["deleted"] == {"done": 2, "failed": 0, "cancelled": 0}
    assert document["failed_older_than"] is None
    assert rows["failed old"] in job_ids(conn, ops_app)


@pytest.mark.parametrize("duration", ["1y", "abc", "-1d", ""])
def test_prune_with_a_malformed_duration_is_a_usage_error_naming_the_forms(
    cli: Cli, duration: str
) -> None:
    result = cli("prune", "--done-older-than", duration)

    assert result.returncode == 2
    assert "Invalid value for '--done-older-than'" in result.stderr
    assert "30s, 15m, 12h, 1d, 2w" in result.stderr


# -- the app option -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "arguments",
    [("stats",), ("jobs", "list"), ("jobs", "show", "1"), ("workers",), ("prune",)],
)
def test_a_command_without_an_app_is_a_usage_error(cli: Cli, arguments: tuple[str, ...]) -> None:
    result = cli(*arguments, app_option=False)

    assert result.returncode == 2
    assert "Missing option '-A' / '--app'" in result.stderr
