"""The Django app ``pgtasks.contrib.django`` (label ``pgtasks``)."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class PgTasksConfig(AppConfig):  # type: ignore[misc]
    name = "pgtasks.contrib.django"
    label = "pgtasks"
    verbose_name = "pgtasks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The tasks API (django.tasks, or the backport): importing django.tasks registers
        # its system checks (and so PgTasksBackend.check) under Django >= 6.0, as the
        # backport's app does; `manage.py check` then reports a misconfigured backend.
        from . import _compat  # noqa: F401

        post_migrate.connect(_migrate_schema, sender=self, dispatch_uid="pgtasks.migrate")


def _migrate_schema(*, using: str, **kwargs: Any) -> None:
    """After every ``manage.py migrate``: apply pgtasks migrations newer than the schema."""
    from .config import pgtasks_settings
    from .schema import migrate_schema

    if using == pgtasks_settings()["DATABASE"]:
        migrate_schema(using)
