"""A minimal Django project on pgtasks (docs/howto/django.md).

The database: ``DATABASE_URL`` or ``PGTASKS_DSN`` (a URL or a libpq conninfo string).
"""

from __future__ import annotations

import os

from psycopg.conninfo import conninfo_to_dict

_database = conninfo_to_dict(
    os.environ.get("DATABASE_URL") or os.environ.get("PGTASKS_DSN") or "dbname=example"
)

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["localhost"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "pgtasks.contrib.django",  # pgtasks_worker, pgtasks_beat, pgtasks' schema, the admin
    "examples.django_project.signups",
]
try:  # Django >= 6.0 has django.tasks built in; before, the django-tasks backport
    import django.tasks  # noqa: F401
except ImportError:
    INSTALLED_APPS.append("django_tasks")

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",  # with psycopg 3
        "NAME": _database.get("dbname", ""),
        "USER": _database.get("user", ""),
        "PASSWORD": _database.get("password", ""),
        "HOST": _database.get("host", ""),
        "PORT": _database.get("port", ""),
    }
}

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
