"""Loading an App from ``module:attribute`` (``-A``, ``PGTASKS_APP``, process-pool children)."""

from __future__ import annotations

import importlib
import os
import sys

from .._errors import ConfigurationError
from .app import App

#: Attributes looked up when the path names a module only (as Celery does).
DEFAULT_ATTRIBUTES = ("app", "application")


def load_app(path: str) -> App:
    """Import ``module:attribute``; the current directory is importable, as with Celery.

    ConfigurationError, naming the path, when the module cannot be imported or the
    attribute is not an App.
    """
    module_name, _, attribute = path.partition(":")
    if not module_name:
        raise ConfigurationError(f"invalid app {path!r}: expected module:attribute")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigurationError(
            f"cannot import {module_name!r} for app {path!r}: {error}"
        ) from None
    candidates = [attribute] if attribute else list(DEFAULT_ATTRIBUTES)
    for name in candidates:
        app = getattr(module, name, None)
        if isinstance(app, App):
            return app
    raise ConfigurationError(f"{path!r} does not name a pgtasks App (looked for {candidates})")
