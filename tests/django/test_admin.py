"""The jobs admin: lists and filters, and the retry / cancel actions (pgtasks' admin
operations, the rules of ``pgtasks jobs retry`` and ``pgtasks jobs cancel``)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from pgtasks.contrib.django._compat import TaskResultStatus
from tests.apps.django_project.shop import tasks

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "/admin/pgtasks/job/"


@pytest.fixture
def staff() -> Client:
    user = User.objects.create_superuser("admin", "admin@example.com", "secret")
    client = Client()
    client.force_login(user)
    return client


def set_status(job_id: str, status: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgtasks.jobs SET status = %s, attempts = max_attempts,"
            " finished_at = now(), last_error = 'ValueError: boom' WHERE id = %s",
            [status, int(job_id)],
        )


def messages_of(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def test_the_changelist_lists_and_filters_jobs(staff: Client) -> None:
    email = tasks.send_email.enqueue("a@example.com")
    add = tasks.add.enqueue(1, 2)

    page = staff.get(CHANGELIST)
    assert page.status_code == 200
    text = page.content.decode()
    # Each job under its Django task's own path, in the list and in the task filter.
    assert "tests.apps.django_project.shop.tasks.send_email" in text
    assert "tests.apps.django_project.shop.tasks.add" in text
    # (Other tests of this process may have left rows of the old runner task in the
    # schema: this test's own jobs are the ones that must not show under it.)
    listed = {job.id: job.task_name for job in page.context["cl"].result_list}
    assert listed[int(email.id)] == "tests.apps.django_project.shop.tasks.send_email"
    assert listed[int(add.id)] == "tests.apps.django_project.shop.tasks.add"

    by_queue = staff.get(CHANGELIST, {"queue": "emails"})
    assert {job.id for job in by_queue.context["cl"].result_list} >= {int(email.id)}
    assert int(add.id) not in {job.id for job in by_queue.context["cl"].result_list}
    by_status = staff.get(CHANGELIST, {"status__exact": "pending"})
    assert {int(email.id), int(add.id)} <= {j.id for j in by_status.context["cl"].result_list}
    by_task = staff.get(CHANGELIST, {"task_name": "tests.apps.django_project.shop.tasks.add"})
    assert by_task.status_code == 200
    by_add = {job.id: job.task_name for job in by_task.context["cl"].result_list}
    assert int(add.id) in by_add and int(email.id) not in by_add
    assert set(by_add.values()) == {"tests.apps.django_project.shop.tasks.add"}

    detail = staff.get(f"{CHANGELIST}{add.id}/change/")
    assert detail.status_code == 200
    # Read-only: posting the page changes nothing.
    staff.post(f"{CHANGELIST}{add.id}/change/", {"priority": "99"})
    assert tasks.add.get_result(add.id).task.priority == 0
    assert staff.get(f"{CHANGELIST}add/").status_code == 403


def test_retry_action_requeues_failed_jobs_and_refuses_others(staff: Client) -> None:
    failed = tasks.add.enqueue(1, 2)
    pending = tasks.add.enqueue(3, 4)
    set_status(failed.id, "failed")

    response = staff.post(
        CHANGELIST,
        {"action": "retry_jobs", "_selected_action": [failed.id, pending.id]},
        follow=True,
    )
    assert response.status_code == 200
    shown = messages_of(response)
    assert any(f"retried 1 job(s): {failed.id}" in message for message in shown), shown
    assert any(f"job {pending.id} is pending" in message for message in shown), shown
    assert tasks.add.get_result(failed.id).status == TaskResultStatus.READY


def test_cancel_action_cancels_pending_jobs(staff: Client) -> None:
    pending = tasks.add.enqueue(1, 2)
    done = tasks.add.enqueue(3, 4)
    set_status(done.id, "done")

    response = staff.post(
        CHANGELIST,
        {"action": "cancel_jobs", "_selected_action": [pending.id, done.id]},
        follow=True,
    )
    shown = messages_of(response)
    assert any(f"cancelled: job(s) {pending.id}" in message for message in shown), shown
    assert any(f"already finished: job(s) {done.id}" in message for message in shown), shown
    cancelled = tasks.add.get_result(pending.id)
    assert cancelled.status == TaskResultStatus.FAILED
    assert cancelled.errors[-1].exception_class_path == "pgtasks.JobCancelled"
    assert "cancelled" in cancelled.errors[-1].traceback


def test_the_admin_needs_staff(staff: Client) -> None:
    anonymous = Client()
    assert anonymous.get(CHANGELIST).status_code == 302
    viewer = User.objects.create_user("viewer", password="secret", is_staff=True)
    client = Client()
    client.force_login(viewer)
    assert client.get(CHANGELIST).status_code == 403
