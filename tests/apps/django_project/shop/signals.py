"""Receivers of the Django task signals: they record what the worker sent as Order rows."""

from __future__ import annotations

from typing import Any

from pgtasks.contrib.django._compat import task_finished, task_started

from .models import Order


def record(kind: str) -> Any:
    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        if task_result.task.name in ("add", "unstorable"):
            Order.objects.create(reference=f"signal:{kind}:{task_result.id}:{task_result.status}")

    return receiver


on_started = record("started")
on_finished = record("finished")
task_started.connect(on_started, dispatch_uid="shop.started")
task_finished.connect(on_finished, dispatch_uid="shop.finished")
