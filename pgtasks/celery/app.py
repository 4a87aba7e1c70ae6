"""``Celery``: Celery's application object over a pgtasks App.

The pgtasks App is built when first needed (``app.native``), from ``app.conf``, as
Celery finalizes its app lazily: tasks declared before (``@app.task``, ``@shared_task``,
``autodiscover_tasks``) are registered with it then, under their Celery names.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from .._app.app import App
from ._state import apps as _apps
from ._state import current as _current
from ._state import current_app
from ._state import default_factory as _default_factory
from ._state import lock as _lock
from ._state import shared as _shared
from .builtins import errback, starmap
from .builtins import map as map_items
from .calling import apply_async as _apply_async
from .calling import apply_eagerly as _apply_eagerly
from .calling import send_task as _send_task
from .canvas import Signature as _Signature
from .canvas import chunks as _chunks
from .canvas import to_native as _to_native
from .canvas import xmap as _xmap
from .canvas import xstarmap as _xstarmap
from .config import CeleryCompatibilityWarning, Settings
from .configuration import Configuration
from .control import Control
from .exceptions import ImproperlyConfigured
from .result import AsyncResult as _AsyncResult
from .result import EagerResult as _EagerResult
from .result import GroupResult as _GroupResult
from .task import TASK_OPTIONS, Task, register_native

#: The built-in tasks every app has (``celery.map`` ...), by short name.
BUILTINS: dict[str, Callable[..., Any]] = {
    "map": map_items,
    "starmap": starmap,
    "errback": errback,
}


class Signal:
    """``app.on_after_configure.connect`` / ``on_after_finalize`` (a minimal signal)."""

    def __init__(self) -> None:
        self.receivers: list[Callable[..., Any]] = []

    def connect(self, receiver: Callable[..., Any] | None = None, **options: Any) -> Any:
        if receiver is None:
            return lambda function: self.connect(function, **options)
        self.receivers.append(receiver)
        return receiver

    def send(self, sender: Any, **kwargs: Any) -> None:
        for receiver in list(self.receivers):
            receiver(sender=sender, **kwargs)


class Celery(Configuration):
    """``Celery("proj", broker="postgresql://...")``: a PostgreSQL DSN as the broker (or
    none: PGTASKS_DSN, DATABASE_URL, else the embedded server)."""

    def __init__(
        self,
        main: str | None = None,
        loader: Any = None,
        backend: Any = None,
        amqp: Any = None,
        events: Any = None,
        log: Any = None,
        control: Any = None,
        set_as_current: bool = True,
        tasks: Any = None,
        broker: str | None = None,
        include: Sequence[str] | None = None,
        changes: Mapping[str, Any] | None = None,
        config_source: Any = None,
        fixups: Any = None,
        task_cls: type[Task] | str | None = None,
        autofinalize: bool = True,
        namespace: str | None = None,
        strict_typing: bool = True,
        **kwargs: Any,
    ) -> None:
        self.main = main
        self.conf = Settings()
        self.task_cls: type[Task] = _task_class(task_cls) if task_cls else Task
        self._tasks: dict[str, Task] = {}
        self._native: App | None = None
        self._finalizing = False
        self._autodiscover: list[tuple[Any, str]] = []
        self.on_after_configure = Signal()
        self.on_after_finalize = Signal()
        self.on_configure = Signal()
        self._periodic: list[tuple[Any, Any, dict[str, Any]]] = []
        if broker is not None:
            self.conf["broker_url"] = broker
        if backend is not None:
            self.conf["result_backend"] = backend
        if include:
            self.conf["include"] = tuple(include)
        if changes:
            self.conf.update(changes)
        if kwargs:
            self.conf.update(kwargs)
        if config_source is not None:
            self.config_from_object(config_source, namespace=namespace)
        with _lock:
            _apps.append(self)
            if set_as_current:
                _current.append(self)
        for builtin in ("map", "starmap", "errback"):
            self._builtin(builtin)

    def __repr__(self) -> str:
        return f"<Celery {self.main} on pgtasks>"

    # -- tasks --
    def task(self, *args: Any, **options: Any) -> Any:
        """``@app.task``, ``@app.task()`` or ``@app.task(bind=True, name=..., ...)``."""
        if len(args) == 1 and callable(args[0]) and not options:
            return self._task_from_fun(args[0])
        if args:
            raise TypeError("@app.task takes keyword options only")

        def decorate(function: Callable[..., Any]) -> Task:
            return self._task_from_fun(function, **options)

        return decorate

    def _task_from_fun(
        self,
        function: Callable[..., Any],
        name: str | None = None,
        base: type[Task] | None = None,
        bind: bool = False,
        **options: Any,
    ) -> Task:
        unknown = set(options) - set(TASK_OPTIONS)
        if unknown:
            raise ImproperlyConfigured(
                f"task {function.__qualname__!r}: option(s) {', '.join(sorted(unknown))} are"
                " not Celery task options pgtasks knows"
            )
        for dropped in ("serializer",):
            if options.get(dropped) not in (None, "json"):
                raise ImproperlyConfigured(
                    f"task {function.__qualname__!r}: serializer={options[dropped]!r}: pgtasks"
                    " stores arguments and results as JSON only"
                )
        if options.pop("typing", True) is False:
            warnings.warn(
                f"task {function.__qualname__!r}: typing=False is not honoured: pgtasks checks"
                " arguments against the function's signature when a job is enqueued",
                CeleryCompatibilityWarning,
                stacklevel=3,
            )
        for accepted in (
            "shared",
            "lazy",
            "trail",
            "track_started",
            "store_errors_even_if_ignored",
            "reject_on_worker_lost",
            "acks_late",
        ):
            options.pop(accepted, None)
        if options.pop("pydantic", False):
            raise ImproperlyConfigured(
                f"task {function.__qualname__!r}: pydantic=True is not supported: pgtasks"
                " passes JSON values as they are (validate them in the task)"
            )
        task_name = name or _task_name(function, self.main)
        existing = self._tasks.get(task_name)
        if existing is not None:
            return existing
        base = base or self.task_cls
        run = function if bind else staticmethod(function)
        attributes = {
            "name": task_name,
            "run": run,
            "bind": bind,
            "__doc__": function.__doc__,
            "__module__": function.__module__,
            "__wrapped__": function,
            "_app": self,
            **options,
        }
        task_type = type(function.__name__, (base,), attributes)
        task: Task = task_type()
        task.app = self
        self._tasks[task_name] = task
        if self._native is not None and not self._finalizing:
            register_native(task)
        return task

    def register_task(self, task: Task | type[Task]) -> Task:
        """Register a class-based task (a Task subclass with ``run``)."""
        instance = task() if isinstance(task, type) else task
        instance.app = self
        instance.name = instance.name or _task_name(type(instance), self.main)
        self._tasks[str(instance.name)] = instance
        if self._native is not None and not self._finalizing:
            register_native(instance)
        return instance

    @property
    def tasks(self) -> dict[str, Task]:
        self._discover()
        return self._tasks

    def builtin(self, name: str) -> Task:
        return self._tasks[name]

    def _builtin(self, short: str) -> None:
        function = BUILTINS[short]
        self._task_from_fun(function, name=f"celery.{short}", bind=True, max_retries=3)

    def autodiscover_tasks(
        self, packages: Any = None, related_name: str = "tasks", force: bool = False
    ) -> None:
        """Import ``<package>.tasks`` of each package (Django's installed apps when none
        are named) when the app is built (``force=True``: now)."""
        self._autodiscover.append((packages, related_name))
        if force:
            self._discover()

    def _discover(self) -> None:
        while self._autodiscover:
            packages, related_name = self._autodiscover.pop(0)
            if packages is None:
                names = _django_apps()
            else:
                names = list(packages() if callable(packages) else packages)
            for package in names:
                try:
                    importlib.import_module(f"{package}.{related_name}")
                except ModuleNotFoundError as error:
                    if error.name not in (f"{package}.{related_name}", package):
                        raise
        for module in tuple(self.conf.imports or ()) + tuple(self.conf.include or ()):
            importlib.import_module(module)
        with _lock:
            shared = list(_shared)
        for function, options in shared:
            self._task_from_fun(function, **options)

    def add_periodic_task(
        self,
        schedule: Any,
        sig: Any,
        args: Sequence[Any] = (),
        kwargs: Any = None,
        name: str | None = None,
        **options: Any,
    ) -> str:
        """A periodic task (``on_after_configure`` receivers call this); beat runs it.
        Its name: ``name``, else the signature's repr (as Celery keys it)."""
        sig = sig.clone(args, kwargs or {})
        key = name or repr(sig)
        self._periodic.append((schedule, sig, {"name": key, **options}))
        if self._native is not None and not self._finalizing:
            self._add_schedule(key, schedule, sig.name, sig.args, sig.kwargs, sig.options)
        return key

    # -- the pgtasks App --
    @property
    def native(self) -> App:
        """The pgtasks App under this one (built, with every task, on first use)."""
        if self._native is None:
            with _lock:
                if self._native is None:
                    return self._finalize()
        return self._native

    __pgtasks_app__ = native

    def finalize(self, auto: bool = False) -> None:
        self.native  # noqa: B018 - building it is the point

    def _finalize(self) -> App:
        self.on_configure.send(self)
        native = App(
            self.conf.broker_url if _is_dsn(self.conf.broker_url) else None, **self._app_options()
        )
        self._native = native
        self._finalizing = True
        try:
            self.on_after_configure.send(self)
            self._discover()
            for task in list(self._tasks.values()):
                register_native(task)
            for entry_name, entry in dict(self.conf.beat_schedule or {}).items():
                self._add_entry(entry_name, entry)
            for schedule, sig, options in self._periodic:
                self._add_schedule(
                    options["name"], schedule, sig.name, sig.args, sig.kwargs, sig.options
                )
        finally:
            self._finalizing = False
        self.on_after_finalize.send(self)
        return native

    def _app_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"default_queue": self.conf.task_default_queue}
        expires = self.conf.result_expires
        if expires is not None:
            seconds = expires.total_seconds() if isinstance(expires, timedelta) else float(expires)
            options["prune_done_after"] = seconds if seconds > 0 else None
        for name, value in self.conf.items():
            if name.startswith("pgtasks_"):
                options[name[len("pgtasks_") :]] = value
        return options

    # -- what Task and Signature call (this module imports the others; they import none) --
    def apply_task_async(
        self, task: Task, *args: Any, **kwargs: Any
    ) -> _AsyncResult | _EagerResult:
        return _apply_async(task, *args, **kwargs)

    def apply_task_eagerly(self, task: Task, *args: Any, **kwargs: Any) -> _EagerResult:
        return _apply_eagerly(task, *args, **kwargs)

    def signature_of(self, task: Task, *args: Any, **kwargs: Any) -> _Signature:
        return _Signature(task, *args, **kwargs)

    def canvas_of(self, kind: str, task: Task, *args: Any) -> _Signature:
        makers: dict[str, Callable[..., _Signature]] = {
            "map": _xmap,
            "starmap": _xstarmap,
            "chunks": _chunks,
        }
        return makers[kind](task, *args)

    def to_native(self, sig: Any) -> Any:
        return _to_native(self, sig)

    # -- calling and results --
    def send_task(
        self,
        name: str,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Any:
        return _send_task(self, name, args, kwargs, **options)

    def signature(
        self,
        name: str,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Any:
        return _Signature(name, args, kwargs, options=options, app=self)

    def AsyncResult(self, task_id: str | int, **kwargs: Any) -> Any:
        return _AsyncResult(task_id, app=self, **kwargs)

    def GroupResult(self, group_id: str | None = None, results: Any = None, **kwargs: Any) -> Any:
        return _GroupResult(group_id, results, app=self)

    def start(self, argv: Sequence[str] | None = None) -> None:
        """``app.start()`` (``python -m proj.celery worker ...``): the ``pgtasks`` command
        line with ``-A`` naming this app's main module."""
        import sys

        from ..cli import main as command_line

        arguments = list(sys.argv[1:] if argv is None else argv)
        command_line.main(["-A", str(self.main), *arguments], prog_name="pgtasks")

    worker_main = start

    @property
    def control(self) -> Any:
        return Control(self)

    @property
    def Task(self) -> type[Task]:
        return self.task_cls

    def close(self) -> None:
        if self._native is not None:
            self._native.close()

    def __enter__(self) -> Celery:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _django_apps() -> list[str]:
    """The installed Django apps' packages (Django set up first, as Celery's fixup does)."""
    try:
        import django
        from django.apps import apps as django_apps
    except ImportError as error:
        raise ImproperlyConfigured(
            "autodiscover_tasks() without packages reads Django's installed apps, but Django"
            " is not installed: name the packages, autodiscover_tasks(['proj.app'])"
        ) from error
    if not django_apps.ready:
        django.setup()
    return [config.name for config in django_apps.get_app_configs()]


def _is_dsn(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(("postgres://", "postgresql://"))


def _task_class(value: type[Task] | str) -> type[Task]:
    if isinstance(value, str):
        module_name, _, attribute = value.replace(":", ".").rpartition(".")
        value = getattr(importlib.import_module(module_name), attribute)
    if not (isinstance(value, type) and issubclass(value, Task)):
        raise ImproperlyConfigured(
            f"task_cls must be a pgtasks.celery Task subclass, got {value!r}"
        )
    return value


def _task_name(function: Any, main: str | None) -> str:
    """Celery's default name: ``module.function`` (``main.function`` for __main__)."""
    module = function.__module__
    if module == "__main__" and main:
        module = main
    return f"{module}.{function.__name__}"


def shared_task(*args: Any, **options: Any) -> Any:
    """``@shared_task``: a task of every app (those that exist and those made later); the
    object returned proxies the current app's task."""

    def create(function: Callable[..., Any]) -> Any:
        with _lock:
            _shared.append((function, dict(options)))
            apps = list(_apps)
        for app in apps:
            app._task_from_fun(function, **options)
        return _SharedTask(function, options)

    if len(args) == 1 and callable(args[0]) and not options:
        return create(args[0])
    return create


class _SharedTask:
    """What ``@shared_task`` returns: the current app's task of the function."""

    def __init__(self, function: Callable[..., Any], options: dict[str, Any]) -> None:
        self._function = function
        self._options = options
        self.__wrapped__ = function
        self.__doc__ = function.__doc__

    def _task(self) -> Task:
        app: Celery = current_app()
        return app._task_from_fun(self._function, **self._options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._task(), name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._task()(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<@shared_task {self._function.__module__}.{self._function.__name__}>"


__all__ = ["Celery", "current_app", "shared_task"]

_default_factory.append(lambda: Celery("default"))
