"""``@app.task``'s registration: a function made a Task of an App, under its name and
its former names (aliases)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._errors import TaskRegistrationError
from .tasks import Task

if TYPE_CHECKING:
    from .app import App


def register_task(
    app: App, function: Callable[..., Any], *, bind: bool, options: dict[str, Any]
) -> Task[Any, Any]:
    """Make ``function`` a task of ``app`` (``@app.task``); a second task of one name is
    a TaskRegistrationError."""
    if isinstance(function, Task):
        raise TaskRegistrationError(f"{function!r} is already a task")
    task: Task[Any, Any] = Task(app, function, bind=bind, **options)
    with app._lock:
        for name in (task.name, *task.aliases):
            if name in app.tasks:
                raise TaskRegistrationError(
                    f"a task named {name!r} is already registered; pass name= to"
                    " register another function under a different name"
                )
        app.tasks[task.name] = task
        for alias in task.aliases:  # a worker claims and runs the jobs of its old names
            app.tasks[alias] = task
    return task
