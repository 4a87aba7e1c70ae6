"""The Django tasks API: ``django.tasks`` (Django >= 6.0) or the ``django_tasks`` backport.

Django 6.0 needs Python >= 3.12; on older Pythons (and Django 5.2 LTS) the PyPI package
``django-tasks`` provides the same API under the module name ``django_tasks``.
"""

from __future__ import annotations

try:  # Django >= 6.0
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
    from django.tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started

    TASKS_MODULE = "django.tasks"
except ImportError:  # the backport (pip install django-tasks)
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
        InvalidTaskError,
        TaskResultDoesNotExist,
    )
    from django_tasks.signals import (
        task_enqueued,
        task_finished,
        task_started,
    )

    TASKS_MODULE = "django_tasks"

__all__ = [
    "DEFAULT_TASK_QUEUE_NAME",
    "TASKS_MODULE",
    "BaseTaskBackend",
    "InvalidTaskError",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
