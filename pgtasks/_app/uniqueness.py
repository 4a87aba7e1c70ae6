"""Uniqueness scopes of a task's jobs: ``unique_key=``, ``unique_while=``, ``unique_for=``.

A job's key is its ``idempotency_key=`` (per call) or, failing that, what the task's
``unique_key=`` callable returns for the job's arguments. Its scope:

* none (the default): the key is unique for the life of the row (``idempotency_key``);
* ``unique_while="active"``: unique among pending and running jobs;
* ``unique_for=timedelta(...)``: one job per key in each fixed window of that length of
  the database's clock, aligned to the epoch.

A scope given per call replaces the task's. See docs/howto/flow-control.md, "Uniqueness".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Literal, Protocol

from .._errors import TaskRegistrationError, UniquenessError
from .._jobs import JobSpec, ScopedJobSpec
from .._payload import MAX_KEY_BYTES, check_name

UniqueWhile = Literal["active"]
UNIQUE_WHILE_VALUES: tuple[UniqueWhile, ...] = ("active",)
#: Longest period of unique_for= (about 31 years, as the longest countdown).
MAX_PERIOD = timedelta(seconds=1e9)

_JOB_FIELDS = tuple(field.name for field in dataclasses.fields(JobSpec))


@dataclasses.dataclass(frozen=True)
class Uniqueness:
    """A task's uniqueness options (None on a task that has none)."""

    key: Callable[..., str] | None
    while_active: bool
    period: timedelta | None


def check_unique_while(value: object, error: type[Exception]) -> bool:
    """True for "active"; False for None."""
    if value is None:
        return False
    if isinstance(value, str) and value in UNIQUE_WHILE_VALUES:
        return True
    raise error(
        f"unique_while= must be 'active' (one pending or running job per key) or None,"
        f" got {value!r}; a key without unique_while= or unique_for= is unique for the"
        " job's whole life"
    )


def check_unique_for(value: object, error: type[Exception]) -> timedelta | None:
    if value is None:
        return None
    if not isinstance(value, timedelta):
        raise error(
            f"unique_for= must be a datetime.timedelta, e.g. timedelta(minutes=5), got {value!r}"
        )
    if value <= timedelta(0):
        raise error(f"unique_for= must be a positive timedelta, got {value!r}")
    if value > MAX_PERIOD:
        raise error(f"unique_for= must be at most {MAX_PERIOD.days} days, got {value!r}")
    return value


def _check_one_scope(while_active: bool, period: timedelta | None, error: type[Exception]) -> None:
    if while_active and period is not None:
        raise error(
            "unique_while='active' and unique_for= cannot be combined: a key has one scope;"
            " pick unique_while='active' (no second job while one is pending or running)"
            " or unique_for= (one job per window)"
        )


def task_uniqueness(task_name: str, options: Mapping[str, Any]) -> Uniqueness | None:
    """The task options unique_key=, unique_while=, unique_for=, checked."""
    key = options.get("unique_key")
    if key is None and options.get("unique_while") is None and options.get("unique_for") is None:
        return None
    prefix = f"task {task_name!r}: "
    if key is not None and not callable(key):
        raise TaskRegistrationError(
            f"{prefix}unique_key= must be a callable of the task's arguments returning the"
            f" key (a str), got {key!r}"
        )
    try:
        while_active = check_unique_while(options.get("unique_while"), TaskRegistrationError)
        period = check_unique_for(options.get("unique_for"), TaskRegistrationError)
        _check_one_scope(while_active, period, TaskRegistrationError)
    except TaskRegistrationError as error:
        raise TaskRegistrationError(prefix + str(error)) from None
    return Uniqueness(key, while_active, period)


def _computed_key(
    task: UniqueTask,
    function: Callable[..., str],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> str:
    try:
        key = function(*args, **kwargs)
    except Exception as error:
        raise UniquenessError(
            f"task {task.name!r}: its unique_key= callable raised {error!r} for args={args!r}"
            f" kwargs={kwargs!r}"
        ) from error
    if not isinstance(key, str):
        raise UniquenessError(
            f"task {task.name!r}: its unique_key= callable must return a str, got {key!r}"
        )
    try:
        return check_name("unique_key", key, MAX_KEY_BYTES)
    except ValueError as error:
        raise UniquenessError(f"task {task.name!r}: {error}") from None


def scoped_spec(
    task: UniqueTask,
    spec: JobSpec,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    unique_while: object,
    unique_for: object,
    tick_key: str | None,
) -> JobSpec:
    """``spec`` (built with the call's idempotency_key) with the key and scope it gets
    from the call and the task: a JobSpec keyed for life, or a ScopedJobSpec.

    ``tick_key`` is beat's key of a schedule tick: always a key for life, so each tick
    is enqueued once whatever the task's scope (whose key is then the call's key: the
    schedule's name unless the task has unique_key=).
    """
    uniqueness = task.uniqueness
    if unique_while is not None or unique_for is not None:
        while_active = check_unique_while(unique_while, UniquenessError)
        period = check_unique_for(unique_for, UniquenessError)
        _check_one_scope(while_active, period, UniquenessError)
    elif uniqueness is not None:
        while_active, period = uniqueness.while_active, uniqueness.period
    else:
        while_active, period = False, None
    key = spec.idempotency_key
    if key is None and uniqueness is not None and uniqueness.key is not None:
        key = _computed_key(task, uniqueness.key, args, kwargs)
    fields = {name: getattr(spec, name) for name in _JOB_FIELDS}
    if not while_active and period is None:
        fields["idempotency_key"] = tick_key if tick_key is not None else key
        return JobSpec(**fields)
    if key is None:
        scope = "unique_while='active'" if while_active else f"unique_for={period!r}"
        raise UniquenessError(
            f"task {task.name!r}: {scope} needs a key: pass idempotency_key= to"
            " apply_async(), or give the task unique_key= (a callable of its arguments"
            " that returns the key)"
        )
    fields["idempotency_key"] = tick_key
    return ScopedJobSpec(**fields, unique_key=key, unique_for=period)


def schedule_key(task: UniqueTask, schedule_name: str) -> str | None:
    """The scoped key of a periodic task's jobs when the task has a scope but no
    unique_key=: the schedule's name (no two of its jobs active, or in one window).
    """
    uniqueness = task.uniqueness
    if uniqueness is None or uniqueness.key is not None:
        return None
    if not uniqueness.while_active and uniqueness.period is None:
        return None
    return schedule_name


class UniqueTask(Protocol):
    """What uniqueness reads of a task."""

    @property
    def name(self) -> str: ...

    @property
    def uniqueness(self) -> Uniqueness | None: ...
