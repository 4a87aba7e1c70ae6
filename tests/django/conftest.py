"""The Django tests: pytest-django on tests/apps/django_project, on the suite's server.

Django is configured here only, so the rest of the suite runs without it. pytest-django
creates the test database (``pgtasks_django_tests``, suffixed per xdist worker) on the
server of the ``dsn`` fixture; its migration creates pgtasks' schema there.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.apps.django_project.settings")

import django
from psycopg.conninfo import conninfo_to_dict, make_conninfo

django.setup()

from tests.support.environment import NOT_INHERITED  # noqa: E402
from tests.support.processes import Processes  # noqa: E402


@pytest.hookimpl(hookwrapper=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> Iterator[None]:
    """pytest-django sorts every test of the session by its database use; keep the
    suite's own order (the Django tests all use the transactional database)."""
    order = {id(item): index for index, item in enumerate(items)}
    yield
    items.sort(key=lambda item: order.get(id(item), len(order)))


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    dsn: str, django_db_modify_db_settings_parallel_suffix: None
) -> None:
    """Point Django's default database at the test server (before its test database)."""
    from django.conf import settings

    params = conninfo_to_dict(dsn)
    settings.DATABASES["default"].update(
        NAME=params.get("dbname", "postgres"),
        USER=params.get("user", ""),
        PASSWORD=params.get("password", ""),
        HOST=params.get("host", ""),
        PORT=params.get("port", ""),
    )


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, dsn: str) -> Iterator[None]:
    """Close pgtasks' pools, and end the sessions of killed workers that the server has
    not noticed yet, before pytest-django drops the test database."""
    from django.db import connection

    from pgtasks.contrib.django import reset_app

    reset_app()
    yield
    reset_app()
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            [connection.settings_dict["NAME"]],
        )


@pytest.fixture
def django_dsn(django_db_setup: None) -> str:
    """The conninfo of the test database (what a worker subprocess connects to)."""
    from django.db import connection

    settings_dict = connection.settings_dict
    params = {
        "dbname": settings_dict["NAME"],
        "user": settings_dict["USER"],
        "password": settings_dict["PASSWORD"],
        "host": settings_dict["HOST"],
        "port": settings_dict["PORT"],
    }
    return make_conninfo(**{key: value for key, value in params.items() if value})


@pytest.fixture
def django_env(django_dsn: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in NOT_INHERITED}
    env.update(
        DJANGO_SETTINGS_MODULE="tests.apps.django_project.settings",
        PGTASKS_DJANGO_DSN=django_dsn,
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.fixture
def manage(tmp_path: Path, django_env: dict[str, str]) -> Iterator[Processes]:
    """``python -m django COMMAND`` subprocesses on the test database."""
    processes = Processes(tmp_path, "unused")
    yield processes
    for child in processes.children:
        if child.alive():
            child.process.kill()
            child.process.wait(10)


def django_command(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "django", *arguments]


@pytest.fixture
def start_worker(manage: Processes, django_env: dict[str, str]):  # type: ignore[no-untyped-def]
    def start(*arguments: str):  # type: ignore[no-untyped-def]
        child = manage.spawn(
            "django-worker",
            django_command("pgtasks_worker", "--poll-interval=0.2", *arguments),
            django_env,
        )
        child.wait_for_log(" started: ", timeout=30)
        return child

    return start
