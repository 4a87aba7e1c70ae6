"""A Celery-shaped front on pgtasks: a Celery project changes its imports (and its
broker URL: a PostgreSQL DSN, or none for the embedded server).

    from pgtasks.celery import Celery, shared_task, group, chain, chord, signature
    from pgtasks.celery.exceptions import Retry, MaxRetriesExceededError
    from pgtasks.celery.result import AsyncResult, GroupResult

Under it are pgtasks' App, job rows and workflows (``app.native``): every job is visible
to the ``pgtasks`` command line, the dashboard and the metrics. This package never
imports Celery. See docs/howto/coming-from-celery.md.
"""

from __future__ import annotations

from . import states
from .app import Celery, current_app, shared_task
from .canvas import Signature, chain, chord, chunks, group, maybe_signature, signature, subtask
from .config import CeleryCompatibilityWarning
from .result import AsyncResult, GroupResult
from .schedules import crontab, schedule, solar
from .task import Task

__all__ = [
    "AsyncResult",
    "Celery",
    "CeleryCompatibilityWarning",
    "GroupResult",
    "Signature",
    "Task",
    "chain",
    "chord",
    "chunks",
    "crontab",
    "current_app",
    "group",
    "maybe_signature",
    "schedule",
    "shared_task",
    "signature",
    "solar",
    "states",
    "subtask",
]
