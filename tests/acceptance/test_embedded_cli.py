"""``pgtasks embedded start|status|stop`` without an app: a real embedded PostgreSQL in a
fresh directory, started, inspected, connected to and stopped by the commands."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.environment import pgtasks_command

pytestmark = pytest.mark.acceptance

#: What would point the commands elsewhere than the directory they run in.
UNSET = ("PGTASKS_DSN", "DATABASE_URL", "PGTASKS_APP", "PGTASKS_EMBEDDED_DIR")


@pytest.fixture
def project() -> Iterator[Path]:
    """A project directory the embedded server's OS user may enter (as root it is not
    root: see pgtasks/_embedded.py), removed afterwards with its server stopped."""
    path = Path(tempfile.mkdtemp(prefix="pgtasks-embedded-cli-"))
    path.chmod(0o711)
    yield path
    pgtasks("embedded", "stop", "--data-dir", str(path / ".pgtasks"), cwd=path)
    shutil.rmtree(path, ignore_errors=True)


def pgtasks(*arguments: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key not in UNSET}
    return subprocess.run(
        pgtasks_command(*arguments),
        cwd=cwd,
        env={**env, **extra},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_start_status_and_stop_the_server_of_the_current_directory(project: Path) -> None:
    data_dir = project / ".pgtasks"
    before = pgtasks("embedded", "status", cwd=project)
    assert before.returncode == 3, before.stderr
    assert before.stdout == (
        f"embedded PostgreSQL: not running\n  data directory: {data_dir} (not initialised)\n"
    )

    started = pgtasks("embedded", "start", cwd=project)
    assert started.returncode == 0, started.stderr
    dsn = started.stdout.strip()
    assert started.stderr == f"embedded PostgreSQL running in {data_dir}\n"
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)

    again = pgtasks("embedded", "start", cwd=project)
    status = pgtasks("embedded", "status", cwd=project)
    document = json.loads(pgtasks("embedded", "status", "--json", cwd=project).stdout)
    assert again.stdout.strip() == dsn
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[0].startswith("embedded PostgreSQL 18: running (pid ")
    assert lines[1:] == [f"  data directory: {data_dir}", f"  dsn:            {dsn}"]
    assert document["running"] is True and document["dsn"] == dsn
    assert document["data_dir"] == str(data_dir) and document["version"] == "18"

    stopped = pgtasks("embedded", "stop", cwd=project)
    assert (stopped.returncode, stopped.stdout) == (0, "stopped\n"), stopped.stderr
    after = pgtasks("embedded", "status", cwd=project)
    assert after.returncode == 3
    assert after.stdout.endswith(f"{data_dir} (initialised)\n")
    assert pgtasks("embedded", "stop", cwd=project).stdout == "not running\n"


def test_the_data_directory_comes_from_the_option_or_the_environment(project: Path) -> None:
    elsewhere = project / "elsewhere"
    by_option = pgtasks("embedded", "status", "--data-dir", str(elsewhere), cwd=project)
    by_env = pgtasks(
        "embedded", "status", "--json", cwd=project, PGTASKS_EMBEDDED_DIR=str(elsewhere)
    )

    assert by_option.returncode == 3
    assert f"data directory: {elsewhere} (not initialised)" in by_option.stdout
    assert json.loads(by_env.stdout)["data_dir"] == str(elsewhere)
    assert not elsewhere.exists()  # status creates nothing


def test_start_says_when_a_configured_dsn_is_what_apps_use(project: Path) -> None:
    started = pgtasks(
        "embedded", "start", cwd=project, PGTASKS_DSN="postgresql://app@db.example/app"
    )

    assert started.returncode == 0, started.stderr
    assert "note: PGTASKS_DSN is set, so apps connect to that server, not to this one" in (
        started.stderr
    )
