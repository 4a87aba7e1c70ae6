"""Running an example module the way its docstring says, as a user would."""

from __future__ import annotations

import subprocess
import sys

from tests.support.environment import ROOT


def run_example(module: str, env: dict[str, str], *, timeout: float = 120) -> str:
    """``python -m module`` from the repository root; its output, once it exited 0."""
    completed = subprocess.run(
        [sys.executable, "-m", module],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return completed.stdout
