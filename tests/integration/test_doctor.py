"""pgtasks doctor: each warning provoked on a real server, and the CLI's exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pgtasks import App
from pgtasks._app.doctor import Thresholds, diagnose, exit_code
from pgtasks._leases import ClaimRequest
from pgtasks._operations import Stats, format_stats
from tests.support.environment import ROOT, pgtasks_env

#: Thresholds low enough that a few seconds of age already count.
SENSITIVE = Thresholds(
    snapshot_warning=0.0,
    snapshot_critical=3600.0,
    prepared_warning=0.0,
    dead_minimum=1,
    dead_ratio_warning=0.2,
    backlog_warning=0.0,
)


def collect_stats(app: App) -> Stats:
    with app.connection() as conn:
        return app.admin.collect_stats(conn)


def finding(app: App, check: str, limits: Thresholds = SENSITIVE) -> Any:
    with app.connection() as conn:
        findings = diagnose(app, conn, limits)
    return next(item for item in findings if item.check == check)


def test_an_open_repeatable_read_transaction_is_reported_as_pinning_the_horizon(
    app: App, dsn: str
) -> None:
    with psycopg.connect(dsn, application_name="forgotten report") as holder:
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM pg_class").fetchone()
        result = finding(app, "xmin horizon")
        assert result.level == "warning"
        assert "forgotten report" in result.summary or "pid" in result.summary
        assert "pg_terminate_backend" in result.remedy
        holder.rollback()


def test_a_prepared_transaction_is_reported_when_the_server_allows_them(
    app: App, admin: psycopg.Connection[Any], dsn: str
) -> None:
    row = admin.execute("SHOW max_prepared_transactions").fetchone()
    if row is None or int(row[0]) == 0:
        pytest.skip("the server has max_prepared_transactions = 0")
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT 1")
        conn.execute("PREPARE TRANSACTION 'pgtasks-doctor-test'")
    try:
        result = finding(app, "prepared transactions")
        assert result.level == "warning"
        assert "pgtasks-doctor-test" in result.summary
    finally:
        admin.execute("ROLLBACK PREPARED 'pgtasks-doctor-test'")


def test_a_job_running_under_a_dead_worker_is_reported_stuck(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task
    def orphan() -> None:
        return None

    orphan.delay()
    app.queries.claim_jobs(admin, ClaimRequest(10**9, limit=1))

    result = finding(app, "stuck jobs")

    assert result.level == "warning"
    assert result.summary.startswith("1 job(s) running under dead or silent workers")


def test_a_waiting_backlog_and_dead_rows_are_reported(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task
    def waiting() -> None:
        return None

    waiting.delay_many([{}] * 50)
    admin.execute(
        f'DELETE FROM "{app.schema}".jobs'
        f' WHERE id IN (SELECT id FROM "{app.schema}".all_jobs LIMIT 40)'
    )
    admin.execute(f'ANALYZE "{app.schema}".jobs')

    assert finding(app, "backlog").level == "warning"
    jobs_table = finding(app, "table jobs")
    assert "dead rows" in jobs_table.summary


def test_a_healthy_schema_has_no_job_findings_and_levels_decide_the_exit_code(app: App) -> None:
    with app.connection() as conn:
        findings = diagnose(app, conn)
    by_check = {item.check: item for item in findings}
    assert by_check["stuck jobs"].level == "ok"
    assert by_check["backlog"].level == "ok"
    assert by_check["connections"].summary.endswith(
        "in use (" + by_check["connections"].summary.split("(")[-1]
    )
    assert exit_code([item for item in findings if item.check in ("stuck jobs", "backlog")]) == 0


def test_doctor_cli_prints_json_and_exits_1_on_warnings(
    make_app: Callable[..., App], admin: psycopg.Connection[Any], dsn: str
) -> None:
    app = make_app()

    @app.task(name="basic.noop")
    def noop() -> None:
        return None

    noop.delay()
    app.queries.claim_jobs(admin, ClaimRequest(10**9, limit=1))
    env = pgtasks_env(dsn, app.schema)
    completed = subprocess.run(
        [sys.executable, "-m", "pgtasks", "doctor", "-A", "tests.apps.basic:app", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = json.loads(completed.stdout)
    stuck = next(item for item in report["findings"] if item["check"] == "stuck jobs")
    assert stuck["level"] == "warning"
    assert report["status"] in ("warning", "critical")
    assert completed.returncode == {"warning": 1, "critical": 2}[report["status"]]

    text = subprocess.run(
        [sys.executable, "-m", "pgtasks", "doctor", "-A", "tests.apps.basic:app"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "WARNING  stuck jobs: 1 job(s) running under dead or silent workers" in text.stdout
    assert text.returncode == completed.returncode


def test_the_database_default_isolation_is_reported_and_pgtasks_runs_read_committed(
    app: App,
) -> None:
    result = finding(app, "isolation")
    assert result.level == "ok"
    assert "READ COMMITTED" in result.summary


def test_limits_rows_the_claim_cannot_take_and_jobs_it_leaves_out_are_reported(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task(name="doctor.limited", concurrency=1, rate_limit="5/s")
    def limited() -> None: ...

    @app.task(name="doctor.plain")
    def plain() -> None: ...

    with app.connection() as conn:
        app.queries.upsert_limits(conn, app.limit_definitions())
    healthy = finding(app, "limits")
    assert (healthy.level, healthy.summary) == (
        "ok",
        "1 limit(s) stored, every value usable, no job left out",
    )

    # A DBA dropped the checks of migration flow_control and wrote values the claim cannot take.
    schema = app.schema
    for constraint in ("limits_tokens_check", "limits_refilled_at_check"):
        admin.execute(f"ALTER TABLE {schema}.limits DROP CONSTRAINT {constraint}")
    admin.execute(f"UPDATE {schema}.limits SET tokens = '-Infinity', refilled_at = 'infinity'")
    unstored = plain.delay()
    admin.execute(
        f"UPDATE {schema}.jobs SET limit_groups = ARRAY['queue:gone', 'task:gone'] WHERE id = %s",
        [unstored.id],
    )
    oversized = plain.delay()
    admin.execute(f"ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_limit_groups_check")
    admin.execute(
        f"UPDATE {schema}.jobs SET limit_groups = array_fill('task:x'::text, ARRAY[9])"
        " WHERE id = %s",
        [oversized.id],
    )

    assert finding(app, "limits values").level == "warning"
    assert "task:doctor.limited" in finding(app, "limits values").summary
    not_stored = finding(app, "limits not stored")
    assert not_stored.level == "warning"
    assert "1 pending job(s) count in limits that are not stored" in not_stored.summary
    assert "queue:gone, task:gone" in not_stored.summary
    too_many = finding(app, "jobs under too many limits")
    assert too_many.level == "warning"
    assert f"the first: job {oversized.id}" in too_many.summary


def test_an_unreadable_limits_table_is_critical_not_a_traceback(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    admin.execute(f"ALTER TABLE {app.schema}.limits RENAME COLUMN tokens TO tokens_by_hand")
    result = finding(app, "limits")
    assert result.level == "critical"
    assert "the limits table cannot be read" in result.summary


def test_pending_jobs_no_live_worker_knows_are_reported_by_task(
    app: App, make_app: Callable[..., App]
) -> None:
    producer = make_app(schema=app.schema, migrate=False)

    @producer.task(name="newer.deploy")
    def newer() -> None: ...

    @app.task(name="known.task")
    def known() -> None: ...

    newer.delay_many([{} for _ in range(3)])
    known.delay()
    # No live worker: nothing to say about tasks (the backlog check covers it).
    assert finding(app, "unknown tasks").level == "ok"
    with app.connection() as conn:
        app.queries.register_worker(
            conn, hostname="h", pid=1, queues=None, concurrency=1, task_names=["known.task"]
        )
    result = finding(app, "unknown tasks")
    assert result.level == "warning"
    assert "3 job(s) of task `newer.deploy` in queue default" in result.summary
    stats = collect_stats(app)
    assert [(row["task_name"], row["jobs"]) for row in stats.unknown_tasks] == [("newer.deploy", 3)]
    assert "3 job(s) of task `newer.deploy` (queue default) no live worker knows" in (
        format_stats(stats)
    )
    assert stats.as_json()["unknown_tasks"] == [
        {"task": "newer.deploy", "queue": "default", "jobs": 3}
    ]
    # A worker of an earlier release (no task list) knows every task.
    with app.connection() as conn:
        app.queries.register_worker(conn, hostname="h", pid=2, queues=None, concurrency=1)
    assert finding(app, "unknown tasks").level == "ok"
