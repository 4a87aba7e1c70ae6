"""pgtasks for Django (``pip install 'pgtasks[django]'``): see docs/howto/django.md.

- ``TASKS = {"default": {"BACKEND": "pgtasks.contrib.django.PgTasksBackend"}}``: Django
  tasks (``django.tasks`` on Django >= 6.0, else the ``django-tasks`` backport) become
  pgtasks jobs, enqueued on Django's own connection.
- ``INSTALLED_APPS += ["pgtasks.contrib.django"]``: ``manage.py pgtasks_worker``,
  ``manage.py pgtasks_beat``, the schema migration and the admin of jobs.
- ``get_app()``: the project's pgtasks App (``settings.PGTASKS``), for pgtasks tasks of
  your own (``@get_app().task``, or ``from pgtasks.contrib.django import app``).
- ``database_settings()``: a ``DATABASES`` entry from ``PGTASKS_DSN`` / ``DATABASE_URL``,
  or pgtasks' embedded PostgreSQL in development.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import DjangoConfigurationError, database_settings, get_app, reset_app

if TYPE_CHECKING:
    from .backend import PgTasksBackend

__all__ = [
    "DjangoConfigurationError",
    "PgTasksBackend",
    "app",
    "database_settings",
    "get_app",
    "reset_app",
]


def __getattr__(name: str) -> Any:
    if name == "PgTasksBackend":
        from .backend import PgTasksBackend

        return PgTasksBackend
    if name == "app":
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
