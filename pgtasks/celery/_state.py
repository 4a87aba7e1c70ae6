"""The Celery apps made in this process, the current one (Celery's ``current_app``) and
the ``@shared_task`` functions every app registers."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

lock = threading.RLock()
#: Every app made, oldest first.
apps: list[Any] = []
#: The apps made with set_as_current=True: the last is the current one.
current: list[Any] = []
#: ``@shared_task`` functions and their options.
shared: list[tuple[Callable[..., Any], dict[str, Any]]] = []
#: Makes the default app when none exists (set by app.py).
default_factory: list[Callable[[], Any]] = []


def current_app() -> Any:
    """The app last created (Celery's current app); a default one when none was."""
    with lock:
        if not current:
            default_factory[0]()
        return current[-1]


def reset() -> list[Any]:
    """Forget every app and shared task (tests); the apps that were made."""
    with lock:
        made = list(apps)
        apps.clear()
        current.clear()
        shared.clear()
    return made
