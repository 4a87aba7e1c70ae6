"""Hostile rows and input against the operations CLI and the API (issue 12 items 6, 7, 9, 10).

``pgtasks jobs|stats|schedules`` run as real subprocesses on rows written by hand (as
another tool or an attacker with INSERT rights could): no control character reaches the
terminal, no row breaks a command, no bad value prints a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from pgtasks import App, PayloadNotSerializableError, TaskRegistrationError
from pgtasks._app.schedules import ScheduleStatus, format_schedules
from pgtasks._payload import MAX_KEY_BYTES, MAX_NAME_BYTES
from pgtasks._store.base import INFINITY
from tests.support.cli import Cli, Connection
from tests.support.environment import ROOT
from tests.support.inprocess import execute, select
from tests.support.population import insert_job
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

ESCAPES = {
    "task": "evil\x1b[2J\x07task",
    "queue": "q\x1b]0;pwned\x07",
    "last_error": "Traceback (most recent call last):\n  boom\x1b[1A\r\x1b[32mALL GOOD\u202e",
}


def no_traceback(result: Any) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert "Traceback" not in result.stdout, result.stdout


def test_text_output_escapes_control_characters_and_json_stays_exact(
    ops_app: App, conn: Connection, cli: Cli
) -> None:
    """Item 7: jobs list/show, stats and schedules."""
    job_id = insert_job(
        conn,
        ops_app,
        status="failed",
        finished_ago=5,
        attempts=3,
        task=ESCAPES["task"],
        queue=ESCAPES["queue"],
        last_error=ESCAPES["last_error"],
    )
    execute(
        conn,
        ops_app,
        "UPDATE {schema}.jobs SET idempotency_key = %(key)s WHERE id = %(id)s",
        {"key": "key\r\x1b[31m", "id": job_id},
    )
    outputs = [
        cli("jobs", "list"),
        cli("jobs", "show", str(job_id)),
        cli("stats"),
    ]
    for result in outputs:
        assert result.returncode == 0, result.stderr
        assert "\x1b" not in result.stdout and "\x07" not in result.stdout, result.stdout
        assert "\r" not in result.stdout and "\u202e" not in result.stdout
    assert "evil\\x1b[2J\\x07task" in outputs[0].stdout
    assert "q\\x1b]0;pwned\\x07" in outputs[2].stdout
    shown = outputs[1].stdout
    assert "key\\x0d\\x1b[31m" in shown
    assert "boom\\x1b[1A" in shown and "\\u202e" in shown
    document = json.loads(cli("jobs", "show", str(job_id), "--json").stdout)
    assert document["task_name"] == ESCAPES["task"]
    assert document["queue"] == ESCAPES["queue"]
    assert document["last_error"] == ESCAPES["last_error"]
    table = format_schedules(
        datetime.now(timezone.utc),
        [
            ScheduleStatus(
                name="s\x1b[2Jx",
                task_name=ESCAPES["task"],
                trigger=None,
                zone=None,
                next_tick=None,
                next_tick_local=None,
                last_tick=None,
                last_job_id=None,
                processed_until=None,
                declared=False,
            )
        ],
    )
    assert "\x1b" not in table and "s\\x1b[2Jx" in table


def test_infinite_timestamps_break_no_tool(ops_app: App, conn: Connection, cli: Cli) -> None:
    """Item 9: run_at = 'infinity' (and '-infinity') in jobs list/show and get_jobs."""
    later = insert_job(conn, ops_app)
    sooner = insert_job(conn, ops_app, status="failed", finished_ago=1)
    execute(
        conn,
        ops_app,
        "UPDATE {schema}.jobs SET run_at = 'infinity' WHERE id = %(id)s",
        {"id": later},
    )
    execute(
        conn,
        ops_app,
        "UPDATE {schema}.jobs SET run_at = '-infinity', created_at = 'infinity' WHERE id = %(id)s",
        {"id": sooner},
    )
    for arguments in (("jobs", "list"), ("jobs", "show", str(later)), ("jobs", "list", "--json")):
        result = cli(*arguments)
        assert result.returncode == 0, result.stderr
    rows = ops_app.get_jobs([later, sooner])
    assert rows[0].run_at == INFINITY
    assert ops_app.get_job(later).status().value == "pending"


def test_a_non_integer_done_notification_does_not_kill_the_result_listener(
    ops_app: App, conn: Connection
) -> None:
    """Item 9: any role may NOTIFY the done channel."""

    @ops_app.task(name="hostile.noop")
    def noop() -> str:
        return "ok"

    job = noop.delay()
    listener = ops_app.result_listener()
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(_get(job, 20)))
    waiter.start()
    wait_until(lambda: listener.healthy, message="the result listener")
    for payload in ("\u00b2", "1,\u0663,x", "", "-5"):
        conn.execute("SELECT pg_notify(%s, %s)", (ops_app.queries.done_channel, payload))
    # The thread is alive and still wakes waiters: finish the job by hand and notify.
    execute(
        conn,
        ops_app,
        "UPDATE {schema}.jobs SET status = 'done', result = '\"ok\"', finished_at = now()"
        " WHERE id = %(id)s",
        {"id": job.id},
    )
    conn.execute("SELECT pg_notify(%s, %s)", (ops_app.queries.done_channel, str(job.id)))
    waiter.join(10)
    assert got == ["ok"]
    assert listener.healthy
    assert listener._thread is not None and listener._thread.is_alive()


def _get(job: Any, timeout: float) -> Any:
    return job.get(timeout=timeout)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("queue", "q" * (MAX_NAME_BYTES + 1), "over the limit of 200 bytes"),
        ("queue", "a\x00b", "NUL"),
        ("queue", "caf\udce9", "lone surrogate"),
        ("idempotency_key", "k" * (MAX_KEY_BYTES + 1), "over the limit of 1000 bytes"),
        ("idempotency_key", "k\udce9", "lone surrogate"),
    ],
)
def test_bad_names_and_keys_are_rejected_at_the_api(
    ops_app: App, option: str, value: str, message: str
) -> None:
    """Items 6 and 10: a clear ValueError at enqueue, nothing reaches the database."""

    @ops_app.task(name="hostile.named")
    def named() -> None:
        return None

    with pytest.raises(ValueError, match=message):
        named.apply_async(**{option: value})


def test_bad_task_and_schedule_names_and_deep_payloads_are_rejected(ops_app: App) -> None:
    """Items 6 and 10: task and schedule names at declaration; nesting at enqueue."""
    with pytest.raises(TaskRegistrationError, match="over the limit"):
        ops_app.task(name="t" * 300)(lambda: None)
    with pytest.raises(TaskRegistrationError, match="lone surrogate"):
        ops_app.task(name="t\udce9")(lambda: None)

    @ops_app.task(name="hostile.deep")
    def deep(value: Any) -> None:
        return None

    with pytest.raises(TaskRegistrationError, match=r"schedule name .* over the limit"):
        ops_app.add_periodic(deep, every=timedelta(seconds=60), name="s" * 600, args=(1,))
    nested: Any = []
    for _ in range(5000):
        nested = [nested]
    with pytest.raises(PayloadNotSerializableError, match="nested too deeply"):
        deep.delay(nested)


@pytest.mark.parametrize(
    "arguments",
    [
        ("jobs", "retry", "99999999999999999999"),
        ("jobs", "show", "-1"),
        ("jobs", "cancel", "9223372036854775808"),
        ("jobs", "list", "--limit", "99999999999"),
        ("jobs", "list", "--queue", "q" * 300),
        ("jobs", "retry", "--all-failed", "--task", "t" * 300),
        ("workers", "--since", "99999999999999w"),
        ("prune", "--done-older-than", "1e400"),
        ("prune", "--batch-size", "99999999999"),
    ],
)
def test_out_of_range_cli_values_are_usage_errors_without_a_traceback(
    cli: Cli, arguments: tuple[str, ...]
) -> None:
    """Items 6 and 10."""
    result = cli(*arguments)
    no_traceback(result)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Error: Invalid value" in result.stderr or "Error:" in result.stderr


def test_jobs_retry_of_a_bad_task_name_prints_one_line(cli: Cli) -> None:
    result = cli("jobs", "retry", "--all-failed", "--task", "caf\udce9")  # bytes not UTF-8
    no_traceback(result)
    assert result.returncode == 2


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://u:S3%20cr%2Ft%21@127.0.0.1:1/db",
        "host=127.0.0.1 port=1 user=u password='S3 cr/t!' dbname=db",
        "host=127.0.0.1 port=1 user=u password=S3\\ cr/t! dbname=db",
    ],
)
def test_embedded_dsn_never_prints_a_configured_password(dsn: str) -> None:
    """Item 11: `pgtasks embedded dsn` with a configured DSN (URL and key=value forms)."""
    env = {key: value for key, value in os.environ.items() if key != "PGTASKS_APP"}
    env.update(PGTASKS_DSN=dsn, PGTASKS_TEST_SCHEMA="unused")
    result = subprocess.run(
        [sys.executable, "-m", "pgtasks", "embedded", "dsn", "-A", "tests.apps.ops_app:app"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "***" in result.stdout
    for form in ("S3", "cr/t", "cr%2Ft", "t!"):
        assert form not in result.stdout + result.stderr, result.stdout


def test_worker_options_that_contradict_each_other_fail_before_it_starts(
    ops_app: App, cli: Cli, conn: Connection
) -> None:
    """The CLI makes one WorkerSettings of its options: a heartbeat not shorter than the
    lease is refused once, with both values named, before the worker registers."""
    result = cli("worker", "--heartbeat-interval", "40", "--lease-timeout", "30")
    assert result.returncode == 1, result.stderr
    assert "heartbeat_interval (40 s) must be shorter than lease_timeout (30 s)" in result.stderr
    no_traceback(result)
    assert select(conn, ops_app, "SELECT count(*) FROM {schema}.workers") == [(0,)]
