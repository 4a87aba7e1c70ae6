"""Small app modules that tests load the way users do (``-A tests.apps.basic:app``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pgtasks import App


def lazy_app(build: Callable[[], App], module: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` whose ``app`` is built by ``build`` on first access.

    Importing the module then needs no environment: a test process imports its task
    definitions to enqueue the same task names on an App of its own.
    """
    built: list[App] = []

    def __getattr__(name: str) -> Any:
        if name == "app":
            if not built:
                built.append(build())
            return built[0]
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
