"""Settings of the Django project the tests of pgtasks.contrib.django use.

The database: ``PGTASKS_DJANGO_DSN`` (a libpq conninfo) when set (a worker subprocess
gets the test database so); otherwise the test fixtures fill it in before the test
database is created.
"""

from __future__ import annotations

import os

from psycopg.conninfo import conninfo_to_dict

_params = conninfo_to_dict(os.environ.get("PGTASKS_DJANGO_DSN", ""))

SECRET_KEY = "pgtasks-tests-only"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "tests.apps.django_project.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "pgtasks.contrib.django",
    "tests.apps.django_project.shop",
]
try:  # Django >= 6.0 has django.tasks built in
    import django.tasks  # noqa: F401
except ImportError:
    INSTALLED_APPS.append("django_tasks")

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _params.get("dbname", "postgres"),
        "USER": _params.get("user", ""),
        "PASSWORD": _params.get("password", ""),
        "HOST": _params.get("host", ""),
        "PORT": _params.get("port", ""),
        "TEST": {"NAME": "pgtasks_django_tests"},
    }
}

TASKS = {
    "default": {
        "BACKEND": "pgtasks.contrib.django.PgTasksBackend",
        "QUEUES": ["default", "emails"],
    },
    "retrying": {
        "BACKEND": "pgtasks.contrib.django.PgTasksBackend",
        "QUEUES": [],
        "OPTIONS": {"MAX_ATTEMPTS": 3},
    },
}

PGTASKS = {
    "SCHEMA": os.environ.get("PGTASKS_DJANGO_SCHEMA", "pgtasks"),
    "TASK_MODULES": ["tests.apps.django_project.shop.jobs"],
    "APP_OPTIONS": {"poll_interval": 0.2, "heartbeat_interval": 1.0, "lease_timeout": 10.0},
}
