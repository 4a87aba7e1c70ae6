"""Django tasks (``@task``): a PgTasksBackend stores each call as a pgtasks job."""

from __future__ import annotations

try:  # Django >= 6.0
    from django.tasks import task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import task  # type: ignore[no-redef]

from .models import Signup


@task(queue_name="emails")
def send_welcome_email(signup_id: int) -> str:
    signup = Signup.objects.get(pk=signup_id)
    # ... send the email ...
    signup.welcomed = True
    signup.save(update_fields=["welcomed"])
    return f"welcomed {signup.email}"
