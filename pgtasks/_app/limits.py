"""Limits as an app declares them: ``@app.task(concurrency=, concurrency_key=, rate_limit=)``
and ``app.queue(name, concurrency=, rate_limit=)``; what a job row carries for them, and
the definitions a worker stores (docs/howto/flow-control.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .._errors import ConfigurationError, LimitKeyError, TaskRegistrationError
from .._limits import (
    LimitDefinition,
    RateLimit,
    check_concurrency,
    check_limit_target,
    key_instance,
    key_limit_name,
    parse_rate_limit,
    queue_limit_name,
    task_limit_name,
)
from .._payload import MAX_KEY_BYTES, check_name
from .._validation import positive_seconds

#: The value of a concurrency key: a str or an int (bool excluded).
KeyFunction = Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class TaskLimits:
    """The limits of one task. With ``concurrency_key``, ``concurrency`` applies per key."""

    task: str
    concurrency: int | None = None
    concurrency_key: KeyFunction | None = None
    rate: RateLimit | None = None

    @classmethod
    def from_options(cls, task: str, options: Mapping[str, Any]) -> TaskLimits | None:
        concurrency = options.get("concurrency")
        key = options.get("concurrency_key")
        rate_limit = options.get("rate_limit")
        if concurrency is None and key is None and rate_limit is None:
            return None
        try:
            check_limit_target("a task under a limit: name", task)
            if concurrency is not None:
                check_concurrency("task option concurrency=", concurrency)
            rate = parse_rate_limit("task option rate_limit=", rate_limit) if rate_limit else None
        except ValueError as error:
            raise TaskRegistrationError(f"task {task!r}: {error}") from None
        if rate_limit is not None and rate is None:
            raise TaskRegistrationError(
                f"task {task!r}: task option rate_limit= must look like '100/m', got {rate_limit!r}"
            )
        if key is not None:
            if not callable(key):
                raise TaskRegistrationError(
                    f"task {task!r}: concurrency_key= must be a function of the task's"
                    f" arguments returning a str or int, got {key!r}"
                )
            if concurrency is None:
                raise TaskRegistrationError(
                    f"task {task!r}: concurrency_key= needs concurrency= (the most jobs"
                    " of one key running at once)"
                )
        return cls(task, concurrency, key, rate)

    def definitions(self) -> list[LimitDefinition]:
        found = []
        if self.concurrency_key is not None:
            found.append(LimitDefinition(key_limit_name(self.task), self.concurrency))
            if self.rate is not None:
                found.append(LimitDefinition(task_limit_name(self.task), None, self.rate))
        elif self.concurrency is not None or self.rate is not None:
            found.append(LimitDefinition(task_limit_name(self.task), self.concurrency, self.rate))
        return found

    def instances(self, key: str | None) -> list[str]:
        """The limit instances a job of this task counts in, given its key."""
        names = [definition.name for definition in self.definitions()]
        if key is not None:
            names = [key_instance(self.task, key) if n.startswith("key:") else n for n in names]
        return names

    def key_of(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        """The concurrency key of one call (LimitKeyError when it cannot be computed)."""
        function = self.concurrency_key
        if function is None:
            return None
        try:
            value = function(*args, **kwargs)
        except Exception as error:
            raise LimitKeyError(
                f"task {self.task!r}: concurrency_key raised {type(error).__name__}: {error}"
                " (it is called with the job's arguments at enqueue; nothing was written)"
            ) from error
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise LimitKeyError(
                f"task {self.task!r}: concurrency_key must return a str or an int, got"
                f" {value!r} ({type(value).__name__}); nothing was written"
            )
        try:
            return check_name("concurrency key", str(value), MAX_KEY_BYTES)
        except ValueError as error:
            raise LimitKeyError(f"task {self.task!r}: {error}; nothing was written") from None


@dataclasses.dataclass(frozen=True)
class QueueLimits:
    """The settings of one queue, declared with ``app.queue()``: its limits, and its own
    priority aging interval in seconds (None: the App's ``priority_aging``)."""

    queue: str
    concurrency: int | None = None
    rate: RateLimit | None = None
    priority_aging: float | None = None

    @classmethod
    def declare(
        cls, queue: str, concurrency: object, rate_limit: object, priority_aging: object = None
    ) -> QueueLimits:
        try:
            queue = check_name("queue", queue)
        except ValueError as error:
            raise ConfigurationError(str(error)) from None
        try:
            check_limit_target("a queue under a limit: name", queue)
            if concurrency is not None:
                check_concurrency("queue concurrency=", concurrency)
            rate = (
                parse_rate_limit("queue rate_limit=", rate_limit)
                if rate_limit is not None
                else None
            )
            aging = (
                positive_seconds("priority_aging=", priority_aging, error=ValueError)
                if priority_aging is not None
                else None
            )
        except ValueError as error:
            raise ConfigurationError(f"queue {queue!r}: {error}") from None
        return cls(queue, concurrency, rate, aging)  # type: ignore[arg-type]

    @property
    def limited(self) -> bool:
        return self.concurrency is not None or self.rate is not None

    def definition(self) -> LimitDefinition:
        return LimitDefinition(queue_limit_name(self.queue), self.concurrency, self.rate)


def job_limits(
    task_limits: TaskLimits | None,
    queue_limits: QueueLimits | None,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> tuple[list[str] | None, str | None]:
    """``(limit_groups, limit_key)`` of one job: the sorted limit instances it counts in,
    or None when no limit applies; and its concurrency key."""
    names: list[str] = []
    key = None
    if task_limits is not None:
        key = task_limits.key_of(args, kwargs)
        names += task_limits.instances(key)
    if queue_limits is not None and queue_limits.limited:
        names.append(queue_limits.definition().name)
    return (sorted(names), key) if names else (None, None)


def app_definitions(
    tasks: Iterable[TaskLimits | None], queues: Iterable[QueueLimits]
) -> list[LimitDefinition]:
    """Every limit an app declares (what its workers store at start)."""
    found: dict[str, LimitDefinition] = {}
    for limits in tasks:
        if limits is not None:
            for definition in limits.definitions():
                found[definition.name] = definition
    for queue in queues:
        if queue.limited:
            found[queue.definition().name] = queue.definition()
    return [found[name] for name in sorted(found)]
