from __future__ import annotations

from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "tests.apps.django_project.shop"

    def ready(self) -> None:
        from . import signals  # noqa: F401
