"""A task's default name, and the warning for a task of a script run as ``__main__``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


class MainModuleTaskWarning(UserWarning):
    """A task is named ``__main__.…``: no worker that imports the app's module knows it."""


def default_task_name(function: Callable[..., Any]) -> str:
    """``module.qualname``. A module run with ``python -m package.module`` is ``__main__``
    in its own process but ``package.module`` in a worker's, which imports it: its
    tasks take that name, so the jobs it enqueues are the worker's tasks."""
    module = function.__module__
    if module == "__main__":
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        if spec is not None and spec.name and spec.name != "__main__":
            module = spec.name
    return f"{module}.{function.__qualname__}"


def main_module_warning(name: str) -> str:
    return (
        f"task {name!r} is defined in a script run as __main__: its jobs name a task no"
        " worker knows (a worker imports the app's module under its own name), so they"
        " would wait for ever. Define the task in an importable module (run the script as"
        " `python -m package.module`, or import the tasks from a module), or give it"
        " @app.task(name=...)"
    )
