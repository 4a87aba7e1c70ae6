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
    app.store.claim_jobs(admin, ClaimRequest(10**9, limit=1))

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
    app.store.claim_jobs(admin, ClaimRequest(10**9, limit=1))
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
