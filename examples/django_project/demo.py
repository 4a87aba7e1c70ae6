"""The Django example end to end: ``python -m examples.django_project.demo``.

Migrates, starts ``manage.py pgtasks_worker``, enqueues a task inside a transaction that
commits and another inside one that rolls back, prints what became of each, and reads
the job back as the admin lists it (``/admin/pgtasks/job/``), under its task's own name.
With no ``PGTASKS_DSN`` or ``DATABASE_URL`` it runs on pgtasks' embedded PostgreSQL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_project.settings")

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402

from pgtasks.contrib.django._compat import TaskResultDoesNotExist  # noqa: E402

from .signups.models import Signup  # noqa: E402
from .signups.tasks import send_welcome_email  # noqa: E402

MANAGE = Path(__file__).with_name("manage.py")


class PaymentFailed(Exception):
    pass


def show_in_admin(job_id: str) -> None:
    """What the admin's list of jobs shows of the job (as a staff user sees it)."""
    from django.contrib.auth.models import User
    from django.test import Client

    staff = User.objects.filter(username="demo-admin").first() or User.objects.create_superuser(
        "demo-admin", "admin@example.com", None
    )
    client = Client(HTTP_HOST="localhost")
    client.force_login(staff)
    page = client.get("/admin/pgtasks/job/", {"q": job_id})
    shown = send_welcome_email.module_path in page.content.decode()
    print(
        f"admin: HTTP {page.status_code}, job {job_id} listed as {send_welcome_email.module_path}"
        if shown
        else f"admin: HTTP {page.status_code}, job {job_id} not listed"
    )


def main() -> None:
    call_command("migrate", verbosity=0)  # Django's tables, and pgtasks' schema
    worker = subprocess.Popen([sys.executable, str(MANAGE), "pgtasks_worker", "-c", "2"])
    try:
        with transaction.atomic():
            ada = Signup.objects.create(email="ada@example.com")
            # The job is written in this transaction: it exists once (and if) it commits.
            welcome = send_welcome_email.enqueue(ada.pk)
        try:
            with transaction.atomic():
                bob = Signup.objects.create(email="bob@example.com")
                lost = send_welcome_email.enqueue(bob.pk)
                raise PaymentFailed
        except PaymentFailed:
            pass

        deadline = time.monotonic() + 60
        while not welcome.is_finished and time.monotonic() < deadline:
            time.sleep(0.2)
            welcome.refresh()
        print(f"task {welcome.id}: {welcome.status}, returned {welcome.return_value!r}")
        print(f"attempts {welcome.attempts}, worker {welcome.worker_ids[-1]}")
        ada.refresh_from_db()
        print(f"ada welcomed: {ada.welcomed}")
        try:
            send_welcome_email.get_result(lost.id)
        except TaskResultDoesNotExist:
            print(f"task {lost.id} was rolled back with its transaction: no job")
        show_in_admin(welcome.id)
    finally:
        worker.send_signal(signal.SIGTERM)
        print(f"worker stopped with exit code {worker.wait(30)}")


if __name__ == "__main__":
    main()
