"""``manage.py pgtasks_worker`` as a real process runs Django tasks and project tasks."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from pgtasks.contrib.django._compat import TaskResultStatus, task_backends
from tests.apps.django_project.shop import tasks
from tests.apps.django_project.shop.models import Order
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.acceptance]


def finished(result: Any, timeout: float = 20.0) -> Any:
    def done() -> Any:
        fresh = task_backends[result.backend].get_result(result.id)
        return fresh if fresh.is_finished else None

    return wait_until(done, timeout=timeout, message=f"task {result.id} to finish")


def test_the_worker_runs_django_tasks_end_to_end(start_worker: Callable[..., Any]) -> None:
    worker = start_worker()
    added = tasks.add.enqueue(2, 3)
    emailed = tasks.send_email.enqueue("a@example.com")
    async_added = tasks.async_add.enqueue(4, 5)
    context = tasks.report_context.enqueue(tag="ctx")

    result = finished(added)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.errors == []
    assert len(result.worker_ids) == 1 and result.worker_ids[0].isdigit()
    assert result.attempts == 1
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at
    assert finished(emailed).return_value == {"to": "a@example.com", "subject": "hi"}
    assert finished(async_added).return_value == 9
    assert finished(context).return_value == {"tag": "ctx", "attempt": 1, "id": context.id}
    # refresh() reads the row again.
    added.refresh()
    assert added.status == TaskResultStatus.SUCCESSFUL
    assert worker.stop(signal.SIGTERM, timeout=20) == 0


def test_a_failing_task_is_failed_with_its_error(start_worker: Callable[..., Any]) -> None:
    start_worker()
    result = finished(tasks.fail.enqueue("card declined"))

    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 1
    assert len(result.errors) == 1
    error = result.errors[0]
    assert error.exception_class is ValueError
    assert "card declined" in error.traceback
    assert error.traceback.startswith("Traceback")
    # Ends as the traceback Django's backends format: with its newline.
    assert error.traceback.endswith("ValueError: card declined\n"), error.traceback
    with pytest.raises(ValueError, match="failed"):
        _ = result.return_value


def test_attempts_errors_and_context_across_retries(start_worker: Callable[..., Any]) -> None:
    start_worker()
    result = finished(tasks.flaky.enqueue(succeed_on=3), timeout=40)

    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 3
    assert result.attempts == 3
    # One worker id per attempt (all this worker's), one error per failed attempt.
    assert len(result.worker_ids) == 3
    assert len(set(result.worker_ids)) == 1 and result.worker_ids[0].isdigit()
    assert [error.exception_class for error in result.errors] == [RuntimeError, RuntimeError]
    assert "attempt 1 fails" in result.errors[0].traceback
    assert "attempt 2 fails" in result.errors[1].traceback
    # started_at is the first attempt's start; last_attempted_at the third's.
    assert result.enqueued_at <= result.started_at < result.last_attempted_at
    assert result.last_attempted_at <= result.finished_at


def test_worker_ids_name_each_attempts_worker(start_worker: Callable[..., Any]) -> None:
    """A job whose attempts ran on two workers lists both, in order."""
    first = start_worker("--queues=default")
    result = tasks.flaky.using(queue_name="default").enqueue(succeed_on=99)
    wait_until(
        lambda: (
            tasks.flaky.get_result(result.id).attempts >= 1
            and tasks.flaky.get_result(result.id).status == TaskResultStatus.READY
        ),
        timeout=20,
    )
    assert first.stop(signal.SIGTERM, timeout=20) == 0
    second = start_worker("--queues=default")
    done = finished(result, timeout=40)
    assert done.status == TaskResultStatus.FAILED
    assert len(done.worker_ids) == 3
    assert done.worker_ids[0] != done.worker_ids[-1]
    assert len(done.errors) == 3
    assert second.alive()


def test_tasks_use_the_orm_and_see_committed_rows(start_worker: Callable[..., Any]) -> None:
    start_worker()
    order = Order.objects.create(reference="A-1")
    result = finished(tasks.mark_order.enqueue(order.pk))
    assert result.return_value == "A-1"
    order.refresh_from_db()
    assert order.status == "processed"


def test_the_worker_runs_the_projects_pgtasks_tasks(start_worker: Callable[..., Any]) -> None:
    from tests.apps.django_project.shop.jobs import count_orders

    start_worker()
    Order.objects.create(reference="B-1")
    Order.objects.create(reference="B-2")
    handle = count_orders.apply_async(connection=connection.connection)
    assert handle.get(timeout=20) == 2


def test_signals_are_sent_in_the_worker(
    start_worker: Callable[..., Any], django_env: dict[str, str]
) -> None:
    start_worker()
    from tests.apps.django_project.shop.models import Order as Orders

    first = finished(tasks.add.enqueue(1, 1))
    assert first.status == TaskResultStatus.SUCCESSFUL
    # The project's receivers (shop/signals.py) record what they saw as orders.
    seen = sorted(
        Orders.objects.filter(reference__startswith="signal:").values_list("reference", flat=True)
    )
    assert seen == [
        f"signal:finished:{first.id}:SUCCESSFUL",
        f"signal:started:{first.id}:RUNNING",
    ]
    # A return value that cannot be stored fails the task: task_finished says FAILED.
    unstorable = finished(tasks.unstorable.enqueue())
    assert unstorable.status == TaskResultStatus.FAILED
    assert unstorable.errors[0].exception_class is TypeError
    assert "Unsupported type" in unstorable.errors[0].traceback
    signalled = sorted(
        Orders.objects.filter(reference__contains=f":{unstorable.id}:").values_list(
            "reference", flat=True
        )
    )
    assert signalled == [
        f"signal:finished:{unstorable.id}:FAILED",
        f"signal:started:{unstorable.id}:RUNNING",
    ]


def test_worker_help_lists_the_pgtasks_worker_options(
    manage: Any, django_env: dict[str, str]
) -> None:
    import subprocess
    import sys

    from tests.support.environment import ROOT

    completed = subprocess.run(
        [sys.executable, "-m", "django", "pgtasks_worker", "--help"],
        cwd=ROOT,
        env=django_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    for flag in (
        "--queues",
        "--concurrency",
        "--pool",
        "--beat",
        "--prefetch",
        "--shutdown-timeout",
    ):
        assert flag in completed.stdout
    # The metavars and defaults of `pgtasks worker --help`, not click's type names.
    assert "-c N, --concurrency N" in completed.stdout
    assert "--shutdown-timeout SECONDS" in completed.stdout
    assert "RANGE" not in completed.stdout
    assert "[default: info]" in " ".join(completed.stdout.split())
    bad = subprocess.run(
        [sys.executable, "-m", "django", "pgtasks_worker", "--concurrency", "zero"],
        cwd=ROOT,
        env=django_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2
    assert "concurrency" in bad.stderr.lower()


def test_a_process_pool_child_sets_django_up(start_worker: Callable[..., Any]) -> None:
    start_worker("--pool", "process", "--processes", "1")
    order = Order.objects.create(reference="P-1")
    result = finished(tasks.mark_order.enqueue(order.pk), timeout=40)
    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert result.return_value == "P-1"


def test_a_deferred_task_waits_for_run_after(start_worker: Callable[..., Any]) -> None:
    from datetime import timedelta

    from django.utils import timezone

    start_worker()
    later = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 1)
    now = finished(tasks.add.enqueue(2, 2))
    assert now.status == TaskResultStatus.SUCCESSFUL
    assert tasks.add.get_result(later.id).status == TaskResultStatus.READY


@pytest.mark.parametrize(
    "payload",
    [
        '{"task": "subprocess.check_output", "args": [["true"]], "kwargs": {},'
        ' "backend": "default"}',
        '{"task": "no.such.module.task", "args": [], "kwargs": {}, "backend": "default"}',
        '{"task": "tests.apps.django_project.shop.tasks.add", "args": "x", "kwargs": {},'
        ' "backend": "default"}',
        '{"task": "tests.apps.django_project.shop.tasks.add", "args": [1, 2], "kwargs": {},'
        ' "backend": "nope"}',
        '{"task": 7, "args": [], "kwargs": {}, "backend": "default"}',
    ],
)
def test_a_hostile_job_fails_alone(start_worker: Callable[..., Any], payload: str) -> None:
    """A job row written by hand (or by an older release) fails; the worker carries on."""
    worker = start_worker()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgtasks.jobs (task_name, queue, priority, args, kwargs, max_attempts)"
            " VALUES ('pgtasks.django.run', 'default', 0, '[]', %s::jsonb, 1) RETURNING id",
            [payload],
        )
        (job_id,) = cursor.fetchone()

    def status() -> str | None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT status FROM pgtasks.all_jobs WHERE id = %s", [job_id])
            (value,) = cursor.fetchone()
        return value if value in ("failed", "done") else None

    assert wait_until(status, timeout=20) == "failed"
    assert worker.alive()
    assert finished(tasks.add.enqueue(1, 2)).return_value == 3
