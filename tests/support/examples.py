"""Running a Python module (an example, a benchmark) or a script as a user would."""

from __future__ import annotations

import subprocess
import sys

from tests.support.environment import ROOT


def run_python(*arguments: str, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    """``python ARGUMENTS`` with this interpreter from the repository root (``env``: its
    environment, else this process's); its output, once it exited 0."""
    completed = subprocess.run(
        [sys.executable, *arguments],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return completed.stdout


def run_example(module: str, env: dict[str, str], *, timeout: float = 120) -> str:
    """``python -m module`` the way the example's docstring says; its output (exit 0)."""
    return run_python("-m", module, env=env, timeout=timeout)
