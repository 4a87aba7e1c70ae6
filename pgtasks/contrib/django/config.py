"""The pgtasks App of a Django project, configured from ``settings.PGTASKS``.

.. code-block:: python

    PGTASKS = {
        "DATABASE": "default",        # the DATABASES alias pgtasks uses (PostgreSQL, psycopg 3)
        "SCHEMA": "pgtasks",          # the schema of pgtasks' tables
        "TASK_MODULES": [],           # modules the worker imports besides every app's tasks.py
        "APP_OPTIONS": {},            # further pgtasks.App(...) keyword arguments
    }

Every key may be omitted. The DSN is built from the ``DATABASES`` entry, so the worker
connects where Django does.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ..._app.app import App
from ..._errors import ConfigurationError

SETTING = "PGTASKS"
KEYS = ("DATABASE", "SCHEMA", "TASK_MODULES", "APP_OPTIONS")


class DjangoConfigurationError(ConfigurationError, ImproperlyConfigured):  # type: ignore[misc]
    """``settings.PGTASKS``, a ``TASKS`` entry or the database is not usable by pgtasks."""


def pgtasks_settings() -> dict[str, Any]:
    """``settings.PGTASKS`` with its defaults; DjangoConfigurationError on bad keys."""
    configured = getattr(settings, SETTING, None) or {}
    if not isinstance(configured, dict):
        raise DjangoConfigurationError(
            f"settings.{SETTING} must be a dict, got {type(configured).__name__}"
        )
    unknown = sorted(set(configured) - set(KEYS))
    if unknown:
        raise DjangoConfigurationError(
            f"unknown key(s) in settings.{SETTING}: {', '.join(map(repr, unknown))};"
            f" accepted: {', '.join(KEYS)}"
        )
    values: dict[str, Any] = {
        "DATABASE": "default",
        "SCHEMA": "pgtasks",
        "TASK_MODULES": [],
        "APP_OPTIONS": {},
        **configured,
    }
    if values["DATABASE"] not in settings.DATABASES:
        raise DjangoConfigurationError(
            f"settings.{SETTING}['DATABASE'] is {values['DATABASE']!r}, which is not in"
            f" settings.DATABASES (known: {', '.join(sorted(settings.DATABASES))})"
        )
    modules = values["TASK_MODULES"]
    if not isinstance(modules, (list, tuple)) or not all(isinstance(m, str) for m in modules):
        raise DjangoConfigurationError(
            f"settings.{SETTING}['TASK_MODULES'] must be a list of module names, got {modules!r}"
        )
    if not isinstance(values["APP_OPTIONS"], dict):
        raise DjangoConfigurationError(
            f"settings.{SETTING}['APP_OPTIONS'] must be a dict of pgtasks.App() options"
        )
    for key in ("dsn", "schema"):
        if key in values["APP_OPTIONS"]:
            raise DjangoConfigurationError(
                f"settings.{SETTING}['APP_OPTIONS'] may not set {key!r}: pgtasks uses the"
                f" database of settings.{SETTING}['DATABASE'] and the schema of"
                f" settings.{SETTING}['SCHEMA']"
            )
    return values


def database_alias() -> str:
    return str(pgtasks_settings()["DATABASE"])


def raw_connection(alias: str) -> psycopg.Connection[Any]:
    """The psycopg 3 connection under Django's connection ``alias`` (opened if needed).

    Statements on it join Django's transaction (``transaction.atomic()``).
    """
    from django.db import connections

    wrapper = connections[alias]
    if wrapper.vendor != "postgresql":
        raise DjangoConfigurationError(
            f"pgtasks needs PostgreSQL: DATABASES[{alias!r}] uses the {wrapper.vendor} backend"
        )
    wrapper.ensure_connection()
    conn = wrapper.connection
    if not isinstance(conn, psycopg.Connection):
        raise DjangoConfigurationError(
            f"pgtasks needs the psycopg 3 driver under DATABASES[{alias!r}], found"
            f" {type(conn).__module__}.{type(conn).__name__} (psycopg2?):"
            " pip install 'psycopg[binary]' and uninstall psycopg2"
        )
    return conn


def database_dsn(alias: str) -> str:
    """A libpq conninfo string for the Django database ``alias``."""
    from django.db import connections

    wrapper = connections[alias]
    if wrapper.vendor != "postgresql":
        raise DjangoConfigurationError(
            f"pgtasks needs PostgreSQL: DATABASES[{alias!r}] uses the {wrapper.vendor} backend"
        )
    keywords = {default.keyword.decode() for default in psycopg.pq.Conninfo.get_defaults()}
    params: dict[str, Any] = {
        key: value
        for key, value in wrapper.get_connection_params().items()
        if key in keywords and value not in (None, "") and isinstance(value, (str, int))
    }
    return make_conninfo("", **params)


def database_settings(dsn: str | None = None, **extra: Any) -> dict[str, Any]:
    """A ``DATABASES`` entry (Django's PostgreSQL backend, psycopg 3) for ``dsn``: a URL
    or a libpq ``key=value`` string, the socket directory of a local server included.

    Without ``dsn``: ``PGTASKS_DSN``, else ``DATABASE_URL``, else pgtasks' embedded
    PostgreSQL (started if needed, in ``PGTASKS_EMBEDDED_DIR`` or ``./.pgtasks``; for
    development only). ``extra`` keys (``CONN_MAX_AGE``, ``TEST``, …) are added as given.
    """
    from ..._embedded import embedded_dsn
    from ..._store.connecting import embedded_data_dir, resolve_dsn

    chosen = resolve_dsn(dsn) or embedded_dsn(embedded_data_dir(None))
    try:
        params: dict[str, Any] = dict(conninfo_to_dict(chosen))
    except psycopg.ProgrammingError as error:
        raise DjangoConfigurationError(f"database_settings(): not a DSN: {error}") from None
    entry: dict[str, Any] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params.pop("dbname", ""),
        "USER": params.pop("user", ""),
        "PASSWORD": params.pop("password", ""),
        "HOST": params.pop("host", ""),
        "PORT": params.pop("port", ""),
    }
    if params:
        entry["OPTIONS"] = params  # sslmode, options, …: passed to psycopg as they are
    entry.update(extra)
    return entry


_lock = threading.Lock()
_app: App | None = None


def build_app() -> App:
    """A new App for the settings (the runner task of Django tasks registered)."""
    from .runner import register_runner

    values = pgtasks_settings()
    try:
        app = App(
            database_dsn(values["DATABASE"]), schema=values["SCHEMA"], **values["APP_OPTIONS"]
        )
    except TypeError as error:
        raise DjangoConfigurationError(f"settings.{SETTING}['APP_OPTIONS']: {error}") from None
    except DjangoConfigurationError:
        raise
    except ConfigurationError as error:
        raise DjangoConfigurationError(f"settings.{SETTING}: {error}") from None
    register_runner(app)
    return app


def get_app() -> App:
    """This process's pgtasks App for the Django project (built on first use)."""
    global _app
    with _lock:
        if _app is None:
            _app = build_app()
        return _app


def reset_app() -> None:
    """Forget (and close) the App: the next get_app() reads the settings again."""
    global _app
    with _lock:
        app, _app = _app, None
    if app is not None:
        app.close()


def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in (SETTING, "DATABASES"):
        reset_app()


setting_changed.connect(_settings_changed, dispatch_uid="pgtasks.contrib.django.config")
