"""The App that ``manage.py pgtasks_worker`` runs: ``pgtasks.contrib.django.worker:app``.

Loading it sets Django up (a process-pool child starts from here too), imports every
installed app's ``tasks`` module and ``settings.PGTASKS['TASK_MODULES']``, and wraps each
task so that ``close_old_connections()`` runs before and after each job, in the thread
that runs it (as Django does around each request).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import threading
from collections.abc import Callable
from typing import Any

from ..._app.app import App

_lock = threading.Lock()
_wrapped: set[int] = set()
_WRAPPED_MARK = "_pgtasks_django_connections"


def with_connection_cleanup(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` with ``close_old_connections()`` before and after each call."""
    from asgiref.sync import sync_to_async
    from django.db import close_old_connections

    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            await sync_to_async(close_old_connections)()
            try:
                return await function(*args, **kwargs)
            finally:
                await sync_to_async(close_old_connections)()

        setattr(run_async, _WRAPPED_MARK, True)
        return run_async

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        close_old_connections()
        try:
            return function(*args, **kwargs)
        finally:
            close_old_connections()

    setattr(run, _WRAPPED_MARK, True)
    return run


def worker_app() -> App:
    """The project's App with its tasks imported and wrapped for a worker process."""
    import django
    from django.apps import apps
    from django.utils.module_loading import autodiscover_modules

    from .config import get_app, pgtasks_settings

    if not apps.ready:
        django.setup()
    app = get_app()
    with _lock:
        if id(app) not in _wrapped:
            autodiscover_modules("tasks")
            for module in pgtasks_settings()["TASK_MODULES"]:
                importlib.import_module(module)
            for task in app.tasks.values():
                if not getattr(task.function, _WRAPPED_MARK, False):
                    task.function = with_connection_cleanup(task.function)
            _wrapped.add(id(app))
    return app


def __getattr__(name: str) -> Any:
    if name == "app":
        return worker_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
