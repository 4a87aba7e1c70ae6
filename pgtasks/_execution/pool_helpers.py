"""Helpers of the process pool (process_pool.py): how a child exited, and where a spawned
child finds the app."""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._app.app import App


def describe_exit(exitcode: int | None) -> str:
    """``signal 9 (SIGKILL)`` or ``code 3``."""
    if exitcode is None:
        return "an unknown status"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
        return f"signal {-exitcode} ({name})"
    return f"code {exitcode}"


def find_app_path(app: App) -> str | None:
    """``module:attribute`` of a module-level variable holding ``app``, if there is one."""
    candidates = []
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name == "__mp_main__":
            continue
        try:
            attributes = list(vars(module).items())
        except TypeError:
            continue
        for attribute, value in attributes:
            if value is app:
                candidates.append((module_name == "__main__", module_name, attribute))
    if not candidates:
        return None
    candidates.sort()
    _, module_name, attribute = candidates[0]
    if module_name == "__main__" and not getattr(sys.modules["__main__"], "__file__", None):
        return None  # an interactive session: a spawned child cannot import it
    return f"{module_name}:{attribute}"
