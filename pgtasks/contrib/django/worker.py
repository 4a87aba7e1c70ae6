"""The App that ``manage.py pgtasks_worker`` runs: ``pgtasks.contrib.django.worker:app``.

Loading it sets Django up (a process-pool child starts from here too), imports every
installed app's ``tasks`` module and ``settings.PGTASKS['TASK_MODULES']``, registers every
Django task found in the modules imported by then under its own path (the task name of
its jobs), and wraps each task so that ``close_old_connections()`` runs before and after
each job, in the thread that runs it (as Django does around each request).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..._app.app import App

if TYPE_CHECKING:
    from ._compat import Task

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


def register_django_tasks(app: App, tasks: Iterable[Task[Any, Any]]) -> list[str]:
    """Register each Django task with ``app`` under its path (the task name of its jobs),
    so that a worker of ``app`` claims and runs them; the names registered.

    A pgtasks task of the same name is a DjangoConfigurationError naming both.
    """
    # Imported here: importing this module sets nothing up (worker_app() does).
    from .config import DjangoConfigurationError
    from .results import remember
    from .runner import DJANGO_TASK_MARK, runner_for

    registered = []
    for task in tasks:
        name = task.module_path
        existing = app.tasks.get(name)
        if existing is not None:
            if getattr(existing.function, DJANGO_TASK_MARK, None) == name:
                continue  # registered before
            raise DjangoConfigurationError(
                f"the Django task {name!r} and a pgtasks task of the app have the same name:"
                " rename one of them (pass name= to @app.task)"
            )
        remember(task)
        runner = runner_for(name)
        app.task(name=name, bind=True, queue=task.queue_name, max_attempts=1)(runner)
        registered.append(name)
    return registered


def worker_app() -> App:
    """The project's App with its tasks imported and wrapped for a worker process."""
    import django
    from django.apps import apps
    from django.utils.module_loading import autodiscover_modules

    from .config import get_app, pgtasks_settings
    from .results import loaded_tasks

    if not apps.ready:
        django.setup()
    app = get_app()
    with _lock:
        if id(app) not in _wrapped:
            autodiscover_modules("tasks")
            for module in pgtasks_settings()["TASK_MODULES"]:
                importlib.import_module(module)
            register_django_tasks(app, loaded_tasks())
            for task in app.tasks.values():
                if not getattr(task.function, _WRAPPED_MARK, False):
                    task.function = with_connection_cleanup(task.function)
            _wrapped.add(id(app))
    return app


def __getattr__(name: str) -> Any:
    if name == "app":
        return worker_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
