"""pgtasks.testing used the way a user's test suite uses it.

The user's module (tests/apps/user_app.py) creates its App at import time; the
``pgtasks_isolate`` fixture of the plugin (loaded through its pytest11 entry point)
points it at a migrated schema of the test's own, and ``run_until_empty`` drains the
queues with a real in-process worker. The last tests run a user's suite in a pytest
subprocess that loads the plugin only through ``pytest_plugins``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgtasks import App, ConfigurationError, JobStatus, SchemaNotMigratedError
from pgtasks.testing import RunSummary, isolated_schema, run_until_empty, use_test_database
from tests.apps import user_app
from tests.apps.user_app import charge_card, place_order, send_newsletter, send_receipt
from tests.support.environment import ROOT
from tests.support.inprocess import Gates

USER_SUITE = ROOT / "tests" / "apps" / "user_suite"


@pytest.fixture
def shop(pgtasks_isolate: Callable[[App], App]) -> App:
    """The user's App, on this test's own migrated schema."""
    return pgtasks_isolate(user_app.app)


def schema_exists(conn: psycopg.Connection[Any], schema: str) -> bool:
    rows = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema]).fetchall()
    return bool(rows)


# -- run_until_empty --


def test_run_until_empty_runs_due_jobs_and_the_jobs_they_enqueue(shop: App) -> None:
    order = place_order.delay(42, ["tea", "cups", "tray"])
    newsletter = send_newsletter.delay(3)

    summary = run_until_empty(shop, timeout=20)

    assert isinstance(summary, RunSummary)
    assert (summary.started, summary.succeeded, summary.finished) == (3, 3, 3)
    assert (summary.failed, summary.retried, summary.scheduled) == (0, 0, 0)
    assert summary.outcomes == {"done": 3}
    assert order.fetch().result == 3
    assert newsletter.fetch().result == "newsletter 3 sent"
    [receipt] = [job for job in shop.get_jobs(range(1, 10)) if job.task_name == send_receipt.name]
    assert receipt.status is JobStatus.DONE
    assert receipt.result == "receipt for order 42"


def test_run_until_empty_counts_retries_and_failures(shop: App) -> None:
    refused = charge_card.delay(-5)
    charged = charge_card.delay(10)

    summary = run_until_empty(shop, timeout=20)

    assert (summary.started, summary.succeeded, summary.retried, summary.failed) == (3, 1, 1, 1)
    assert summary.outcomes == {"done": 1, "retry": 1, "failed": 1}
    failed = refused.fetch()
    assert failed.status is JobStatus.FAILED
    assert failed.attempts == 2
    assert failed.last_error is not None and "ValueError: cannot charge -5" in failed.last_error
    assert charged.fetch().result == "charged 10"


def test_run_until_empty_does_not_wait_for_jobs_due_later_and_counts_them(shop: App) -> None:
    later = send_receipt.apply_async(args=(1,), countdown=3600)

    summary = run_until_empty(shop, timeout=20)

    assert summary.started == 0
    assert summary.scheduled == 1
    assert later.status() is JobStatus.PENDING


def test_run_until_empty_drains_only_the_queues_it_is_given(shop: App) -> None:
    receipt = send_receipt.delay(5)
    payment = charge_card.delay(3)

    summary = run_until_empty(shop, timeout=20, queues=["emails"])

    assert summary.succeeded == 1
    assert receipt.status() is JobStatus.DONE
    assert payment.status() is JobStatus.PENDING


def test_run_until_empty_on_empty_queues_returns_a_zero_summary(shop: App) -> None:
    summary = run_until_empty(shop, timeout=20)

    assert (summary.started, summary.finished, summary.scheduled) == (0, 0, 0)
    assert summary.seconds < 10


def test_run_until_empty_raises_timeout_error_and_releases_the_job_it_still_runs(
    app: App,
) -> None:
    gates = Gates()
    gate = gates()

    @app.task
    def wait_for_gate() -> None:
        gate.wait(10)

    handle = wait_for_gate.delay()
    try:
        with pytest.raises(TimeoutError, match=r"after 0.5 s, 0 due pending and 1 running job"):
            run_until_empty(app, timeout=0.5)
        assert handle.status() is JobStatus.PENDING
    finally:
        gates.open_all()


def test_run_until_empty_raises_the_error_that_keeps_its_worker_from_starting(
    make_app: Callable[..., App],
) -> None:
    unmigrated = make_app(migrate=False)

    with pytest.raises(SchemaNotMigratedError, match="pgtasks migrate"):
        run_until_empty(unmigrated, timeout=20)


def test_run_until_empty_rejects_a_timeout_that_is_not_positive(app: App) -> None:
    with pytest.raises(ConfigurationError, match="timeout= must be a positive number"):
        run_until_empty(app, timeout=0)


def test_run_until_empty_leaves_no_worker_thread_behind(shop: App) -> None:
    place_order.delay(1, [])
    before = set(threading.enumerate())

    run_until_empty(shop, timeout=20)

    names = [thread.name for thread in threading.enumerate() if thread not in before]
    assert "pgtasks-run-until-empty" not in names
    assert not [name for name in names if name.startswith("pgtasks-job")]


# -- isolation --


def test_isolate_points_the_users_app_at_the_tests_schema_and_puts_it_back_after(
    pgtasks_dsn: str, pgtasks_schema: str, admin: psycopg.Connection[Any]
) -> None:
    original_schema = user_app.app.schema
    original_store = user_app.app.queries

    with use_test_database(user_app.app, pgtasks_dsn, pgtasks_schema) as app:
        handle = send_receipt.delay(9)
        assert app is user_app.app
        assert app.schema == pgtasks_schema
        assert app.dsn == pgtasks_dsn
        assert not app.uses_embedded

    assert user_app.app.schema == original_schema
    assert user_app.app.queries is original_store
    query = sql.SQL("SELECT task_name FROM {}.all_jobs WHERE id = %s")
    rows = admin.execute(query.format(sql.Identifier(pgtasks_schema)), [handle.id]).fetchall()
    assert rows == [(send_receipt.name,)]


def test_each_test_gets_a_schema_of_its_own(shop: App, pgtasks_schema: str) -> None:
    assert shop.schema == pgtasks_schema
    assert pgtasks_schema.startswith("pgtasks_test_")
    assert send_receipt.delay(1).id == 1, "a fresh schema starts its ids at 1"


def test_the_fixtures_server_is_the_suites_server(pgtasks_dsn: str, dsn: str) -> None:
    assert pgtasks_dsn == dsn


def test_isolated_schema_is_migrated_inside_and_dropped_after(
    dsn: str, admin: psycopg.Connection[Any]
) -> None:
    with isolated_schema(dsn, prefix="custom_") as schema:
        assert schema.startswith("custom_")
        assert schema_exists(admin, schema)
        with App(dsn, schema=schema) as app:
            app.check_schema()

    assert not schema_exists(admin, schema)


def test_the_app_factory_builds_apps_on_the_tests_schema(
    pgtasks_app_factory: Callable[..., App], pgtasks_schema: str
) -> None:
    app = pgtasks_app_factory(default_queue="reports")

    @app.task
    def total(numbers: list[int]) -> int:
        return sum(numbers)

    handle = total.delay([1, 2, 3])
    summary = run_until_empty(app, timeout=20, concurrency=1)

    assert app.schema == pgtasks_schema
    assert summary.succeeded == 1
    assert handle.fetch().queue == "reports"
    assert handle.fetch().result == 6


# -- the plugin as a user loads it --


def test_importing_pgtasks_testing_does_not_import_pytest() -> None:
    code = "import sys, pgtasks.testing; print(sorted(m for m in sys.modules if 'pytest' in m))"

    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout

    assert output.strip() == "[]"


def test_a_users_suite_loading_the_plugin_through_pytest_plugins_passes(
    tmp_path: Path, dsn: str
) -> None:
    shutil.copy(USER_SUITE / "user_conftest.py", tmp_path / "conftest.py")
    shutil.copy(USER_SUITE / "user_tests.py", tmp_path / "test_shop.py")
    environment = {
        "PATH": "/usr/bin:/bin",
        "PGTASKS_TEST_DSN": dsn,
        "PYTHONPATH": str(ROOT),
        # Only pytest_plugins = ["pgtasks.testing"] in conftest.py can load the plugin.
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }

    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-W", "error", "-p", "no:cacheprovider", "."],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environment,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout
