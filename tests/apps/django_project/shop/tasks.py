"""Django tasks of the test project (django.tasks, or the django_tasks backport)."""

from __future__ import annotations

from typing import Any

from pgtasks.contrib.django._compat import TaskContext

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task  # type: ignore[no-redef]

from .models import Order


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="emails", priority=10)
def send_email(to: str, subject: str = "hi") -> dict[str, Any]:
    return {"to": to, "subject": subject}


@task
def fail(message: str) -> None:
    raise ValueError(message)


@task(takes_context=True)
def report_context(context: TaskContext, tag: str) -> dict[str, Any]:
    return {"tag": tag, "attempt": context.attempt, "id": context.task_result.id}


@task
async def async_add(a: int, b: int) -> int:
    return a + b


@task
def mark_order(order_id: int) -> str:
    order = Order.objects.get(pk=order_id)
    order.status = "processed"
    order.save()
    return order.reference


@task(backend="retrying", takes_context=True)
def flaky(context: TaskContext, succeed_on: int) -> int:
    if context.attempt < succeed_on:
        raise RuntimeError(f"attempt {context.attempt} fails")
    return context.attempt


@task
def sleep_for(seconds: float) -> None:
    import time

    time.sleep(seconds)


@task
def unstorable() -> Any:
    """Returns what no JSON can hold: the task fails (TypeError, as Django's backends)."""
    return {"when": object()}
