"""``pgtasks queues list|pause|resume`` as real subprocesses against a real PostgreSQL."""

from __future__ import annotations

import json

import pytest

from pgtasks import App
from tests.support.cli import Cli, Connection
from tests.support.population import insert_job, register

pytestmark = pytest.mark.acceptance


def test_pause_list_and_resume_a_queue(cli: Cli, ops_app: App, conn: Connection) -> None:
    worker = register(conn, ops_app, pid=101)
    insert_job(conn, ops_app, task="ops_app.send_email", queue="emails", args='["a@x"]')
    insert_job(conn, ops_app, task="ops_app.send_email", queue="emails", run_in=3600)
    insert_job(
        conn,
        ops_app,
        task="ops_app.add",
        args="[1, 2]",
        status="running",
        locked_by=worker,
        attempts=1,
    )

    paused = cli("queues", "pause", "emails")
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout == "queue emails: paused\n"
    again = cli("queues", "pause", "emails", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"queue": "emails", "changed": False}
    assert ops_app.paused_queues() == ["emails"]

    listed = cli("queues", "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == [
        "QUEUE", "STATE", "PENDING", "DUE", "RUNNING", "PAUSED", "AT", "LIMITS",
    ]  # fmt: skip
    assert lines[1].split()[:5] == ["default", "active", "0", "0", "1"]
    assert lines[2].split()[:5] == ["emails", "paused", "2", "1", "0"]

    document = json.loads(cli("queues", "list", "--json").stdout)
    queues = {entry["queue"]: entry for entry in document["queues"]}
    assert set(queues) == {"default", "emails"}
    assert queues["emails"]["paused"] is True
    assert queues["emails"]["paused_at"] is not None
    assert (queues["emails"]["pending"], queues["emails"]["due"]) == (2, 1)
    assert queues["default"] == {
        "queue": "default",
        "paused": False,
        "paused_at": None,
        "pending": 0,
        "due": 0,
        "running": 1,
        "limits": "-",
    }

    resumed = cli("queues", "resume", "emails")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == "queue emails: resumed\n"
    assert cli("queues", "resume", "emails").stdout == "queue emails: was not paused\n"
    assert ops_app.paused_queues() == []


def test_a_paused_queue_nobody_declares_is_listed(cli: Cli, ops_app: App) -> None:
    assert cli("queues", "pause", "legacy").returncode == 0
    document = json.loads(cli("queues", "list", "--json").stdout)
    assert [(entry["queue"], entry["paused"]) for entry in document["queues"]] == [
        ("default", False),
        ("emails", False),
        ("legacy", True),
    ]


def test_a_bad_queue_name_is_a_usage_error(cli: Cli, ops_app: App) -> None:
    result = cli("queues", "pause", " ")
    assert result.returncode == 2
    assert "queue must be a non-empty string" in result.stderr
    assert "Traceback" not in result.stderr
    assert ops_app.paused_queues() == []


def test_queues_on_a_schema_that_is_not_migrated_fail_with_one_line(
    cli: Cli, ops_app: App, conn: Connection
) -> None:
    conn.execute(f'DROP TABLE "{ops_app.schema}".queue_pauses')
    result = cli("queues", "list")
    assert result.returncode == 1
    assert result.stderr.startswith("error: ")
    assert "pgtasks migrate" in result.stderr
    assert "Traceback" not in result.stderr


def test_pause_host_and_resume_host_on_the_command_line(cli: Cli, ops_app: App) -> None:
    paused = cli("queues", "pause-host", "worker-7.internal")
    again = json.loads(cli("queues", "pause-host", "worker-7.internal", "--json").stdout)
    listed = cli("queues", "list")  # a paused host is not a paused queue
    resumed = cli("queues", "resume-host", "worker-7.internal")

    assert paused.returncode == 0, paused.stderr
    assert paused.stdout == "host worker-7.internal: paused\n"
    assert again == {
        "hostname": "worker-7.internal",
        "changed": False,
        "paused_hosts": ["worker-7.internal"],
    }
    assert resumed.stdout == "host worker-7.internal: resumed\n"
    assert listed.returncode == 0 and "worker-7" not in listed.stdout
