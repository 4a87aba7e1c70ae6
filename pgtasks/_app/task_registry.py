"""Registry: an App's tasks and schedules by name, each added under one lock (the Apps
of its stores share it): a task under its name and its former names (aliases). It never
imports App or Task (a task is any :class:`NamedTask`)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from .._cron import Schedule
from .._errors import TaskRegistrationError


class NamedTask(Protocol):
    """What the registry reads of a task: its name and its former names."""

    @property
    def name(self) -> str: ...

    @property
    def aliases(self) -> Sequence[str]: ...


T = TypeVar("T", bound=NamedTask)


class Registry(Generic[T]):
    """The tasks (by each of their names) and the schedules of an App."""

    def __init__(self) -> None:
        self.tasks: dict[str, T] = {}
        #: Periodic schedules by name (``@app.periodic``, ``app.add_periodic``).
        self.schedules: dict[str, Schedule] = {}
        self._lock = threading.Lock()

    def after_fork(self) -> None:
        """In a forked child: another thread may have held the lock during the fork."""
        self._lock = threading.Lock()

    def add_task(self, task: T) -> T:
        """Register ``task`` under its name and aliases; a second task of one name is a
        TaskRegistrationError."""
        with self._lock:
            for name in (task.name, *task.aliases):
                if name in self.tasks:
                    raise TaskRegistrationError(
                        f"a task named {name!r} is already registered; pass name= to"
                        " register another function under a different name"
                    )
            self.tasks[task.name] = task
            for alias in task.aliases:  # a worker claims and runs the jobs of its old names
                self.tasks[alias] = task
        return task

    def add_schedule(self, schedule: Schedule) -> Schedule:
        """Declare ``schedule``; a second schedule of one name is refused."""
        with self._lock:
            if schedule.name in self.schedules:
                raise TaskRegistrationError(
                    f"a schedule named {schedule.name!r} already exists; pass name= to"
                    " declare another schedule of the same task and expression"
                )
            self.schedules[schedule.name] = schedule
        return schedule
