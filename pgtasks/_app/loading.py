"""Loading an App from ``module:attribute`` (``-A``, ``PGTASKS_APP``, process-pool children).

A Celery-shaped app (``pgtasks.celery.Celery``, or anything with a ``__pgtasks_app__``
App) counts as its App, and ``-A proj`` finds it as Celery does: ``proj.app``,
``proj.celery``, any app among the module's attributes, then the module ``proj.celery``.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from .._errors import ConfigurationError
from .app import App

#: Attributes looked up when the path names a module only (as Celery does).
DEFAULT_ATTRIBUTES = ("app", "application", "celery")


def app_of(value: Any) -> App | None:
    """The App ``value`` is or fronts (a Celery-shaped app's ``__pgtasks_app__``)."""
    if isinstance(value, App):
        return value
    if isinstance(value, type) or not hasattr(type(value), "__pgtasks_app__"):
        return None
    native = value.__pgtasks_app__
    return native if isinstance(native, App) else None


def _import(module_name: str, path: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigurationError(
            f"cannot import {module_name!r} for app {path!r}: {error}"
        ) from None


def find_app(path: str) -> tuple[Any, str]:
    """The app object ``path`` names and its ``module:attribute`` path."""
    module_name, _, attribute = path.partition(":")
    if not module_name:
        raise ConfigurationError(f"invalid app {path!r}: expected module:attribute")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module = _import(module_name, path)
    candidates = [attribute] if attribute else list(DEFAULT_ATTRIBUTES)
    for name in candidates:
        value = getattr(module, name, None)
        if isinstance(value, App) or (value is not None and _fronts(value)):
            return value, f"{module_name}:{name}"
    if not attribute:
        for name, value in vars(module).items():
            if not name.startswith("_") and _fronts(value):
                return value, f"{module_name}:{name}"
        submodule = f"{module_name}.celery"
        if (
            getattr(module, "__path__", None) is not None
            and module_name.rpartition(".")[2] != "celery"
        ):
            try:
                importlib.import_module(submodule)
            except ModuleNotFoundError as error:
                if error.name != submodule:
                    raise
            else:
                return find_app(submodule)
    raise ConfigurationError(f"{path!r} does not name a pgtasks App (looked for {candidates})")


def _fronts(value: Any) -> bool:
    return not isinstance(value, type) and hasattr(type(value), "__pgtasks_app__")


def load_app(path: str) -> App:
    """Import ``module:attribute``; the current directory is importable, as with Celery.

    ConfigurationError, naming the path, when the module cannot be imported or the
    attribute is not an App (or an app that fronts one).
    """
    value, _ = find_app(path)
    app = app_of(value)
    if app is None:
        raise ConfigurationError(f"{path!r} does not name a pgtasks App")
    return app
