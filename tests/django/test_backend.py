"""PgTasksBackend against Django's task API contract (as Django's tests/tasks and
django-tasks-db's backend tests state it), on the real test database."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction
from django.utils import timezone

from pgtasks.contrib.django._compat import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    task_backends,
    task_enqueued,
)
from tests.apps.django_project.shop import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def job_row(job_id: str) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT task_name, queue, priority, status, max_attempts, run_at, kwargs::text"
            " FROM pgtasks.all_jobs WHERE id = %s",
            [int(job_id)],
        )
        row = cursor.fetchone()
    assert row is not None
    names = ("task_name", "queue", "priority", "status", "max_attempts", "run_at", "kwargs")
    return dict(zip(names, row, strict=True))


def test_the_backend_supports_everything() -> None:
    backend = task_backends["default"]
    assert type(backend).__name__ == "PgTasksBackend"
    assert backend.supports_defer
    assert backend.supports_async_task
    assert backend.supports_get_result
    assert backend.supports_priority


def test_enqueue_writes_a_ready_job_and_returns_its_result() -> None:
    result = tasks.add.enqueue(1, b=2)

    assert result.status == TaskResultStatus.READY
    assert result.id.isdigit()
    assert result.task == tasks.add
    assert result.args == [1]
    assert result.kwargs == {"b": 2}
    assert result.backend == "default"
    assert result.enqueued_at is not None
    assert result.started_at is None
    assert result.last_attempted_at is None
    assert result.finished_at is None
    assert result.errors == []
    assert result.worker_ids == []
    assert result.attempts == 0
    assert not result.is_finished
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value
    row = job_row(result.id)
    assert row["task_name"] == "tests.apps.django_project.shop.tasks.add"  # the task's own path
    assert row["queue"] == "default"
    assert row["status"] == "pending"
    assert row["max_attempts"] == 1


def test_get_result_reads_the_job_back() -> None:
    enqueued = tasks.send_email.enqueue("a@example.com", subject="welcome")

    result = task_backends["default"].get_result(enqueued.id)

    assert result.id == enqueued.id
    assert result.status == TaskResultStatus.READY
    assert result.task.func is tasks.send_email.func
    assert result.task.queue_name == "emails"
    assert result.task.priority == 10
    assert result.args == ["a@example.com"]
    assert result.kwargs == {"subject": "welcome"}
    assert result.enqueued_at == enqueued.enqueued_at
    assert tasks.send_email.get_result(enqueued.id).id == enqueued.id
    # What enqueue returned is what get_result reads back, field for field.
    assert result == enqueued


def test_aenqueue_and_aget_result() -> None:
    async def scenario() -> None:
        result = await tasks.add.aenqueue(2, 3)
        fetched = await tasks.add.aget_result(result.id)
        assert fetched.status == TaskResultStatus.READY
        assert fetched.args == [2, 3]
        fetched_by_backend = await task_backends["default"].aget_result(result.id)
        assert fetched_by_backend.id == result.id

    async_to_sync(scenario)()


def test_async_tasks_are_accepted() -> None:
    result = tasks.async_add.enqueue(1, 1)
    assert result.status == TaskResultStatus.READY


@pytest.mark.parametrize("result_id", ["123456789", "not-a-number", "-1", "0", "9" * 30, ""])
def test_a_missing_result_raises_task_result_does_not_exist(result_id: str) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(result_id)


def test_get_result_of_another_task_raises_mismatch() -> None:
    result = tasks.add.enqueue(1, 2)
    with pytest.raises(TaskResultMismatch):
        tasks.send_email.get_result(result.id)


def test_a_pgtasks_job_of_another_task_is_no_task_result() -> None:
    from tests.apps.django_project.shop.jobs import count_orders

    handle = count_orders.apply_async(connection=connection.connection)
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(str(handle.id))


def test_priority_and_queue_go_to_the_job() -> None:
    result = tasks.add.using(priority=-100, queue_name="emails").enqueue(1, 2)
    row = job_row(result.id)
    assert (row["priority"], row["queue"]) == (-100, "emails")
    assert result.task.priority == -100
    high = tasks.add.using(priority=100).enqueue(1, 2)
    assert job_row(high.id)["priority"] == 100


def test_priority_out_of_range_is_refused() -> None:
    with pytest.raises(InvalidTask):
        tasks.add.using(priority=101)
    with pytest.raises(InvalidTask):
        tasks.add.using(priority=-101)


def test_a_queue_not_in_queues_is_refused() -> None:
    with pytest.raises(InvalidTask, match="Queue 'bulk' is not valid"):
        tasks.add.using(queue_name="bulk")


def test_run_after_defers_the_job() -> None:
    when = timezone.now() + timedelta(hours=1)
    result = tasks.add.using(run_after=when).enqueue(1, 2)
    assert job_row(result.id)["run_at"] == when
    fetched = tasks.add.get_result(result.id)
    assert fetched.task.run_after == when
    assert fetched.status == TaskResultStatus.READY


def test_a_naive_run_after_is_refused() -> None:
    with pytest.raises(InvalidTask, match="aware"):
        tasks.add.using(run_after=timezone.now().replace(tzinfo=None))


def test_arguments_that_are_not_json_are_refused_and_write_nothing() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pgtasks.all_jobs")
        before = cursor.fetchone()
    for value in (object(), datetime.now(), {1, 2}):
        # A TypeError, as Django's own backends raise, and an InvalidTask too.
        with pytest.raises(TypeError, match="Unsupported type") as raised:
            tasks.add.enqueue(value, 1)
        assert isinstance(raised.value, InvalidTask)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pgtasks.all_jobs")
        assert cursor.fetchone() == before


def test_arguments_nested_past_the_bound_are_refused_from_any_stack() -> None:
    """Nested 975 deep: past pgtasks' depth limit (a shallow stack encodes it), and past
    json's recursion limit from a deep one; both are InvalidTask, nothing is written."""
    nested: list[Any] = []
    for _ in range(975):
        nested = [nested]

    def deep_stack(levels: int) -> None:
        if levels:
            deep_stack(levels - 1)
        else:
            tasks.add.enqueue(nested, 1)

    with pytest.raises(InvalidTask, match="nested"):
        tasks.add.enqueue(nested, 1)
    with pytest.raises(InvalidTask, match="nested"):
        deep_stack(300)


def test_task_enqueued_is_sent() -> None:
    seen = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append((sender, task_result.id, task_result.status))

    task_enqueued.connect(receiver)
    try:
        result = tasks.add.enqueue(1, 2)
    finally:
        task_enqueued.disconnect(receiver)
    assert seen == [(type(task_backends["default"]), result.id, TaskResultStatus.READY)]


def test_enqueue_in_a_transaction_appears_at_commit() -> None:
    from tests.support.environment import ROOT  # noqa: F401  (the project is importable)

    with transaction.atomic():
        result = tasks.add.enqueue(1, 2)
        # The job is part of this transaction: visible here, not elsewhere yet.
        assert tasks.add.get_result(result.id).status == TaskResultStatus.READY
        assert not committed_elsewhere(result.id)
    assert committed_elsewhere(result.id)


def test_enqueue_in_a_rolled_back_transaction_leaves_no_job() -> None:
    class Abort(Exception):
        pass

    with pytest.raises(Abort), transaction.atomic():
        result = tasks.add.enqueue(1, 2)
        raise Abort
    assert not committed_elsewhere(result.id)
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result(result.id)


def committed_elsewhere(job_id: str) -> bool:
    """Whether another connection (pgtasks' own pool) sees the job."""
    from pgtasks.contrib.django import get_app

    return bool(get_app().get_jobs([int(job_id)]))
