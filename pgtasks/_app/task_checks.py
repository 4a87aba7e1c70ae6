"""Checks of a task's options at registration (``@app.task``): aliases, positive
numbers, batch execution; and the shape of a ``delay_many`` item."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from .._batches import Batch
from .._errors import TaskRegistrationError
from .._jobs import ExecutorName
from .._payload import check_name
from .._validation import positive_number
from .limits import TaskLimits

#: The signature of a batch task's jobs: any JSON arguments (its function takes their list).
ANY_ARGUMENTS = inspect.Signature(
    [
        inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
        inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
    ]
)


def check_batch(task: CheckedTask, value: object) -> Batch | None:
    """The task option batch=, checked against the task's other options."""
    if value is None:
        return None
    prefix = f"task {task.name!r}: batch="
    if not isinstance(value, Batch):
        raise TaskRegistrationError(
            f"{prefix} must be a pgtasks.Batch, e.g. Batch(max_size=500,"
            f" max_wait=timedelta(seconds=1)), got {value!r}"
        )
    if task.is_async or task.bind or task.executor in ("process", "async"):
        raise TaskRegistrationError(
            f"{prefix} needs a plain def taking the list of jobs (no bind=, no async def, no"
            " executor='process' or 'async'): the worker's batch service calls it on its thread"
        )
    if task.soft_timeout is not None:
        raise TaskRegistrationError(
            f"{prefix} cannot be combined with soft_timeout=: the handler runs a whole batch"
            " (timeout= is its hard limit: past it, every job of the batch is retried)"
        )
    if task.limits is not None:
        raise TaskRegistrationError(
            f"{prefix} cannot be combined with concurrency= or rate_limit=: a batch is"
            " claimed and run as one"
        )
    return value


def refuse_limited_batch(task: CheckedTask, limit_groups: object) -> None:
    """A batch task's job in a queue with limits would never be claimed: refused."""
    if limit_groups is not None and task.batch is not None:
        raise ValueError(
            f"task {task.name!r} runs in batches: its jobs cannot go to a queue with"
            " concurrency or rate limits; route them to another queue"
        )


def task_aliases(name: str, aliases: object) -> tuple[str, ...]:  # former names: valid names
    if isinstance(aliases, str) or not isinstance(aliases, (list, tuple)):
        raise TaskRegistrationError(f"task {name!r}: aliases= must be a list of names")
    try:
        return tuple(check_name("task alias", alias) for alias in aliases)
    except ValueError as error:
        raise TaskRegistrationError(f"task {name!r}: {error}") from None


def positive_option(name: str, value: float | None, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    positive_number(f"task option {name}=", value, error=TaskRegistrationError)


def arguments_of(item: Any) -> tuple[Sequence[Any], Mapping[str, Any]]:
    """``(args, kwargs)`` of a ``delay_many`` item: a kwargs mapping or an (args, kwargs)
    pair (kwargs None: none)."""
    if type(item) is dict or isinstance(item, Mapping):
        return (), item
    if isinstance(item, tuple) and len(item) == 2:
        return item[0], {} if item[1] is None else item[1]
    raise TypeError(
        f"delay_many items must be a kwargs dict or an (args, kwargs) pair, got {item!r}"
    )


class CheckedTask(Protocol):
    """What the checks of batch execution read of a task."""

    @property
    def name(self) -> str: ...

    @property
    def batch(self) -> Batch | None: ...

    @property
    def bind(self) -> bool: ...

    @property
    def executor(self) -> ExecutorName | None: ...

    @property
    def is_async(self) -> bool: ...

    @property
    def limits(self) -> TaskLimits | None: ...

    @property
    def soft_timeout(self) -> float | None: ...
