"""A module no test imports: importing it leaves a mark (PGTASKS_DJANGO_TRAP, a file
path) and fails. A job row naming one of its tasks must never get it imported."""

from __future__ import annotations

import os
from pathlib import Path

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task  # type: ignore[no-redef]

_mark = os.environ.get("PGTASKS_DJANGO_TRAP")
if _mark:
    Path(_mark).write_text("imported\n")
raise RuntimeError("tests.apps.django_project.shop.trap was imported")


@task
def sprung() -> None:  # pragma: no cover - never defined: the import fails first
    return None
