"""The Django tasks API: ``django.tasks`` (Django >= 6.0) or the ``django_tasks`` backport.

Django 6.0 needs Python >= 3.12; on older Pythons (and Django 5.2 LTS) the PyPI package
``django-tasks`` provides the same API under the module name ``django_tasks``.

Which one is used depends on whether Django has ``django.tasks``, not on whether an
import happens to fail: with Django >= 6.0 the backport is never used, even when it is
installed, and a name missing from ``django.tasks`` is an error rather than a silent
switch to the backport.

The two differ in a few names; this module exports Django 6.0's:

======================  ================================
Django 6.0              django-tasks (backport)
======================  ================================
``InvalidTask``         ``InvalidTaskError``
``InvalidTaskBackend``  ``InvalidTaskBackendError``
======================  ================================
"""

from __future__ import annotations

import importlib.util


def _has_django_tasks() -> bool:
    """Whether the installed Django ships ``django.tasks`` (Django >= 6.0)."""
    try:
        return importlib.util.find_spec("django.tasks") is not None
    except ModuleNotFoundError:  # no Django at all: let the imports below say so
        return False


if _has_django_tasks():  # Django >= 6.0
    from django.tasks import task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import (
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django.tasks.exceptions import (
        InvalidTask,
        InvalidTaskBackend,
        TaskResultDoesNotExist,
        TaskResultMismatch,
    )
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    TASKS_MODULE = "django.tasks"
else:  # the backport (pip install django-tasks)
    from django_tasks import task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import (
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django_tasks.exceptions import (
        InvalidTaskBackendError as InvalidTaskBackend,
    )
    from django_tasks.exceptions import (
        InvalidTaskError as InvalidTask,
    )
    from django_tasks.exceptions import (
        TaskResultDoesNotExist,
        TaskResultMismatch,
    )
    from django_tasks.signals import (
        task_enqueued,
        task_finished,
        task_started,
    )
    from django_tasks.utils import normalize_json

    TASKS_MODULE = "django_tasks"

__all__ = [
    "DEFAULT_TASK_QUEUE_NAME",
    "TASKS_MODULE",
    "BaseTaskBackend",
    "InvalidTask",
    "InvalidTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "normalize_json",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
