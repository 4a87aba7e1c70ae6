"""How a ``Celery`` app is configured (the base of pgtasks.celery.app.Celery): its
settings read from an object, a module or an environment variable, the queue
``task_routes`` gives a task, and the entries of ``beat_schedule`` added to the pgtasks
App as periodic schedules."""

from __future__ import annotations

import fnmatch
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .config import CeleryCompatibilityWarning, Settings, settings_of
from .exceptions import ImproperlyConfigured, NotRegistered
from .schedules import periodic_options
from .task import Task, register_native

if TYPE_CHECKING:
    from .._app.app import App


class Configuration:
    """Celery's configuration methods; the app holds ``conf``, its tasks and, once built,
    its pgtasks App (``native``)."""

    conf: Settings
    _tasks: dict[str, Task]
    _native: App | None

    if TYPE_CHECKING:  # the app's (pgtasks.celery.app.Celery.native)

        @property
        def native(self) -> App: ...

    def config_from_object(
        self, obj: Any, silent: bool = False, force: bool = False, namespace: str | None = None
    ) -> None:
        """Read settings from an object, a module or "module:attribute" (Django's
        ``"django.conf:settings"`` with ``namespace="CELERY"``)."""
        try:
            values = settings_of(obj, namespace)
        except ImproperlyConfigured:
            if silent:
                return
            raise
        if self._native is not None:
            warnings.warn(
                "config_from_object() after the app was built: settings of the pgtasks App"
                " (broker_url, task_default_queue, ...) take effect for new tasks only",
                CeleryCompatibilityWarning,
                stacklevel=2,
            )
        self.conf.update(values)

    def config_from_envvar(
        self, variable_name: str, silent: bool = False, force: bool = False
    ) -> None:
        import os

        module = os.environ.get(variable_name)
        if not module:
            if silent:
                return
            raise ImproperlyConfigured(f"environment variable {variable_name!r} is not set")
        self.config_from_object(module, silent=silent)

    def add_defaults(self, values: Mapping[str, Any]) -> None:
        for name, value in values.items():
            if name not in self.conf:
                self.conf[name] = value

    def route_of(self, name: str) -> str | None:
        """The queue ``task_routes`` gives task ``name`` (names and globs; a list of maps
        or of router functions taking (name, args, kwargs, options, task))."""
        routes = self.conf.task_routes
        if not routes:
            return None
        for table in routes if isinstance(routes, (list, tuple)) else [routes]:
            if callable(table):
                route = table(name, None, None, {}, task=self._tasks.get(name))
            else:
                route = next(
                    (
                        value
                        for pattern, value in table.items()
                        if fnmatch.fnmatchcase(name, pattern)
                    ),
                    None,
                )
            if route is None:
                continue
            if isinstance(route, str):
                return route
            if isinstance(route, Mapping) and route.get("queue"):
                queue = route["queue"]
                return str(getattr(queue, "name", queue))
        return None

    def _add_entry(self, name: str, entry: Mapping[str, Any]) -> None:
        if "task" not in entry or "schedule" not in entry:
            raise ImproperlyConfigured(f"beat_schedule[{name!r}] needs 'task' and 'schedule'")
        self._add_schedule(
            name,
            entry["schedule"],
            entry["task"],
            entry.get("args", ()),
            entry.get("kwargs", {}),
            entry.get("options", {}),
        )

    def _add_schedule(
        self,
        name: str,
        schedule: Any,
        task_name: str,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        options: Mapping[str, Any],
    ) -> None:
        native = self.native if self._native is None else self._native
        extra = {key: options[key] for key in ("queue", "priority") if options.get(key) is not None}
        ignored = sorted(set(options) - {"queue", "priority"})
        for option in ignored:
            warnings.warn(
                f"beat_schedule[{name!r}] option {option!r} has no effect on pgtasks schedules",
                CeleryCompatibilityWarning,
                stacklevel=4,
            )
        if task_name not in native.tasks:
            if task_name in self._tasks:
                register_native(self._tasks[task_name])
            else:
                raise NotRegistered(
                    f"beat_schedule[{name!r}]: task {task_name!r} is not registered (import"
                    " its module, e.g. with include= or autodiscover_tasks())"
                )
        trigger = periodic_options(schedule, self.conf.timezone)
        native.add_periodic(
            task_name, name=name, args=tuple(args), kwargs=dict(kwargs), **trigger, **extra
        )
