"""Edges of the CLI and the API met as a careless user or a hostile input would: JSON
nested past the bound on the command line, control characters in queue names, tasks of
a script run as ``__main__``, pausing a queue nothing uses, and the embedded server's
warning from commands that need no database."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgtasks import App, TaskRegistrationError
from pgtasks._app.doctor import diagnose
from pgtasks._pytest_plugin import EMBEDDED_TEST_DIR
from tests.support.cli import CLI_APP_PATH, Cli, cli_runner
from tests.support.environment import NOT_INHERITED, ROOT, pgtasks_command
from tests.support.inprocess import select

pytestmark = pytest.mark.acceptance

NO_DATABASE = "no database configured"


@pytest.fixture
def app(make_app: Any) -> App:
    made: App = make_app()
    return made


@pytest.fixture
def cli(app: App) -> Cli:
    return cli_runner(app, CLI_APP_PATH)


def no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr + result.stdout, result.stderr


def test_call_with_json_nested_2000_deep_is_a_usage_error(cli: Cli) -> None:
    deep = "[" * 2000 + "]" * 2000
    for option in ("-a", "-k"):
        value = deep if option == "-a" else '{"to": ' + deep + "}"
        result = cli("call", "cli_app.send_email", option, value)
        no_traceback(result)
        assert result.returncode == 2, result.stderr
        assert "nested 2000 levels deep" in result.stderr or "2001 levels" in result.stderr
        assert "Usage:" in result.stderr


@pytest.mark.parametrize("queue", ["q\x1b[2J", "line\nbreak", "tab\there", "bell\x07", "c1\x9b"])
def test_queue_names_refuse_control_characters_everywhere(app: App, cli: Cli, queue: str) -> None:
    @app.task(name="edges.noop")
    def noop() -> None:
        return None

    with pytest.raises(ValueError, match="queue must not contain control characters"):
        noop.apply_async(queue=queue)
    with pytest.raises(TaskRegistrationError, match="control characters"):
        app.task(name="edges.bad", queue=queue)(lambda: None)
    with pytest.raises(TaskRegistrationError, match="control characters"):
        app.task(name=f"edges.{queue}")(lambda: None)
    for arguments in (
        ("call", "cli_app.send_email", "-a", '["a@example.com"]', "--queue", queue),
        ("queues", "pause", queue),
        ("jobs", "list", "--queue", queue),
    ):
        result = cli(*arguments)
        no_traceback(result)
        assert result.returncode == 2, (arguments, result.stderr)
        assert "control characters" in result.stderr, result.stderr


def _python(
    arguments: list[str], cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *arguments],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_task_of_a_script_run_as_main_warns_and_doctor_names_its_jobs(
    app: App, tmp_path: Path
) -> None:
    (tmp_path / "script_tasks.py").write_text(
        textwrap.dedent(
            """
            from pgtasks import App

            app = App(dsn="postgresql://nobody@127.0.0.1:1/none")

            @app.task
            def send(to: str) -> None:
                return None

            print("registered", send.name)
            """
        )
    )
    env = {key: value for key, value in os.environ.items() if key not in NOT_INHERITED}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    as_script = _python([str(tmp_path / "script_tasks.py")], tmp_path, env)
    assert as_script.returncode == 0, as_script.stderr
    assert "registered __main__.send" in as_script.stdout
    assert "MainModuleTaskWarning" in as_script.stderr, as_script.stderr
    assert "defined in a script run as __main__" in as_script.stderr
    assert "python -m package.module" in as_script.stderr and "name=" in as_script.stderr
    # Run as a module, its tasks take the name a worker importing it gives them.
    as_module = _python(["-m", "script_tasks"], tmp_path, env)
    assert as_module.returncode == 0, as_module.stderr
    assert "registered script_tasks.send" in as_module.stdout
    assert "Warning" not in as_module.stderr, as_module.stderr

    with psycopg.connect(app.dsn, autocommit=True) as conn:
        ((job_id,),) = select(
            conn,
            app,
            "INSERT INTO {schema}.jobs (task_name, queue, args, kwargs, max_attempts)"
            " VALUES ('__main__.send', 'default', %s, %s, 3) RETURNING id",
            ('["a"]', "{}"),
        )
        findings = {finding.check: finding for finding in diagnose(app, conn)}
    finding = findings["__main__ tasks"]
    assert finding.level == "warning"
    assert "__main__.send" in finding.summary and str(job_id) in finding.summary


def test_pausing_a_queue_nothing_uses_pauses_it_with_a_hint(app: App, cli: Cli) -> None:
    unused = cli("queues", "pause", "nobody-uses-this")
    no_traceback(unused)
    assert unused.returncode == 0, unused.stderr
    assert "queue nobody-uses-this: paused" in unused.stdout
    assert "hint: no task or schedule of this app" in unused.stderr
    assert "no live worker uses queue 'nobody-uses-this'" in unused.stderr
    assert "nobody-uses-this" in app.paused_queues()

    used = cli("queues", "pause", "emails")  # cli_app.send_email's queue
    assert used.returncode == 0 and "queue emails: paused" in used.stdout
    assert "hint" not in used.stderr, used.stderr


def _without_a_database(tmp_path: Path) -> dict[str, str]:
    """The environment of a user with no DSN configured; the embedded server is the
    suite's own (already running, when the suite uses it)."""
    env = {key: value for key, value in os.environ.items() if key not in NOT_INHERITED}
    for name in ("PGTASKS_DSN", "DATABASE_URL", "PGTASKS_SESSION_DSN", "PGTASKS_REPLICA_DSN"):
        env.pop(name, None)
    env["PGTASKS_EMBEDDED_DIR"] = str(ROOT / EMBEDDED_TEST_DIR)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    (tmp_path / "plain_app.py").write_text(
        "from pgtasks import App\n\napp = App()\n\n\n@app.task(name='plain.hello')\n"
        "def hello(x: int) -> int:\n    return x\n"
    )
    return env


def test_the_no_database_warning_comes_only_from_commands_that_connect(tmp_path: Path) -> None:
    env = _without_a_database(tmp_path)

    def run(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*pgtasks_command(*arguments), "-A", "plain_app:app"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    for arguments in (("tasks", "list"), ("call", "plain.hello", "-a", "[1, 2]")):
        result = run(*arguments)
        no_traceback(result)
        assert NO_DATABASE not in result.stderr + result.stdout, (arguments, result.stderr)
    if os.environ.get("PGTASKS_TEST_DSN") or not (ROOT / EMBEDDED_TEST_DIR).exists():
        return  # no embedded server of the suite's to print or connect to
    dsn = run("embedded", "dsn")
    assert dsn.returncode == 0, dsn.stderr
    assert dsn.stdout.startswith("postgresql://") and NO_DATABASE not in dsn.stderr, dsn.stderr
    connects = run("queues", "list")
    assert NO_DATABASE in connects.stderr, connects.stderr
