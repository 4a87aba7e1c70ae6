"""Running ``pgtasks <command> -A <app>`` as a subprocess on a test's schema."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import psycopg

from pgtasks import App
from tests.support.environment import ROOT, pgtasks_command, pgtasks_env

#: The operations CLI tests' app.
OPS_APP_PATH = "tests.apps.ops_app:app"
#: The app of the Celery-style commands' tests (call, purge, tasks list).
CLI_APP_PATH = "tests.apps.cli_app:app"

Connection = psycopg.Connection[Any]
Cli = Callable[..., subprocess.CompletedProcess[str]]


def cli_runner(app: App, app_path: str = OPS_APP_PATH) -> Cli:
    """Run ``pgtasks <arguments> -A <app_path>`` on ``app``'s database and schema."""
    env = pgtasks_env(app.dsn, app.schema)

    def run(
        *arguments: str,
        app_option: bool = True,
        input: str | None = None,
        env_extra: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """``app_option``: append ``-A <app_path>``; ``input``: stdin (else none: EOF)."""
        command = pgtasks_command(*arguments)
        if app_option:
            command += ["-A", app_path]
        return subprocess.run(
            command,
            cwd=ROOT,
            env={**env, **(env_extra or {})},
            input=input if input is not None else "",
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    return run
