"""examples/django_project runs end to end: migrate, a real manage.py pgtasks_worker, a
task enqueued in a committed transaction and one in a rolled-back transaction."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator

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


def test_the_django_example_runs(example_database: str) -> None:
    import os

    env = {key: value for key, value in os.environ.items() if key not in NOT_INHERITED}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.update(PGTASKS_DSN=example_database, PYTHONUNBUFFERED="1")
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
    assert conninfo_to_dict(example_database)["dbname"].startswith("pgtasks_django_example_")
