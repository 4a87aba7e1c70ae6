"""Bad settings get clear errors; the system checks; the tasks API in use; the schema
migration; the beat command."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from typing import Any

import django
import pytest
from django.core import checks
from django.core.management import call_command
from django.db import connection

from pgtasks.contrib.django import DjangoConfigurationError, get_app
from pgtasks.contrib.django._compat import TASKS_MODULE, BaseTaskBackend, Task, task_backends
from tests.apps.django_project.shop import tasks
from tests.support.environment import ROOT

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"SCHEMAS": "x"}, "unknown key(s) in settings.PGTASKS: 'SCHEMAS'"),
        ({"DATABASE": "other"}, "'other', which is not in settings.DATABASES"),
        ({"TASK_MODULES": "shop.jobs"}, "must be a list of module names"),
        ({"APP_OPTIONS": {"dsn": "x"}}, "may not set 'dsn'"),
        ({"APP_OPTIONS": {"nope": 1}}, "APP_OPTIONS"),
        ({"SCHEMA": "public"}, "invalid schema name 'public'"),
        ("yes", "settings.PGTASKS must be a dict"),
    ],
)
def test_bad_pgtasks_settings_are_named(settings: Any, value: Any, message: str) -> None:
    settings.PGTASKS = value
    with pytest.raises(DjangoConfigurationError) as raised:
        get_app()
    assert message in str(raised.value)


def test_enqueue_with_bad_settings_writes_nothing(settings: Any) -> None:
    settings.PGTASKS = {"SCHEMAS": "x"}
    with pytest.raises(DjangoConfigurationError):
        tasks.add.enqueue(1, 2)


def test_bad_backend_options_are_named(settings: Any) -> None:
    settings.TASKS = {
        "default": {
            "BACKEND": "pgtasks.contrib.django.PgTasksBackend",
            "OPTIONS": {"MAX_ATTEMPT": 2},
        }
    }
    with pytest.raises(DjangoConfigurationError, match="unknown OPTIONS key"):
        _ = task_backends["default"]


def test_an_unmigrated_schema_is_reported_and_migrate_creates_it(settings: Any) -> None:
    from pgtasks import SchemaNotMigratedError

    settings.PGTASKS = {"SCHEMA": "pgtasks_unmigrated"}
    with connection.cursor() as cursor:
        cursor.execute("DROP SCHEMA IF EXISTS pgtasks_unmigrated CASCADE")
    try:
        with pytest.raises(SchemaNotMigratedError, match="pgtasks_unmigrated"):
            tasks.add.enqueue(1, 2)
        call_command("migrate", verbosity=0)  # the post_migrate handler applies pgtasks'
        result = tasks.add.enqueue(1, 2)
        assert tasks.add.get_result(result.id).id == result.id
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP SCHEMA IF EXISTS pgtasks_unmigrated CASCADE")


def test_the_migration_created_pgtasks_schema() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT max(version) FROM pgtasks.migrations")
        (version,) = cursor.fetchone()
    from pgtasks._store.migrator import head_version

    assert version == head_version()


def test_pgtasks_beat_command_takes_the_beat_options(django_env: dict[str, str]) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "django", "pgtasks_beat", "--help"],
        cwd=ROOT,
        env=django_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    assert "--grace" in completed.stdout
    assert "--log-level" in completed.stdout


def test_the_tasks_api_is_djangos_own_on_django_6() -> None:
    """Django >= 6.0: django.tasks, never the backport (even when it is installed)."""
    if django.VERSION >= (6, 0):
        assert TASKS_MODULE == "django.tasks"
        assert "django_tasks" not in sys.modules
    else:
        assert importlib.util.find_spec("django.tasks") is None
        assert TASKS_MODULE == "django_tasks"
    assert isinstance(task_backends["default"], BaseTaskBackend)
    assert type(tasks.add).__module__ == f"{TASKS_MODULE}.base"
    assert isinstance(tasks.add, Task)


def test_the_system_checks_report_bad_pgtasks_settings(settings: Any) -> None:
    assert not [message for message in checks.run_checks() if message.id.startswith("pgtasks")]
    settings.PGTASKS = {"SCHEMAS": "x"}
    errors = [message for message in checks.run_checks() if message.id == "pgtasks.E001"]
    assert len(errors) == len(settings.TASKS)  # one per PgTasksBackend
    assert all("unknown key(s) in settings.PGTASKS: 'SCHEMAS'" in e.msg for e in errors)
