"""Debounced enqueues: ``debounce=``, ``debounce_key=``, ``debounce_max=`` (task options
and enqueue options; docs/howto/flow-control.md, "Debounce").

A debounced job runs ``debounce`` after the last enqueue of its key: while a job of the
same task and key is pending and has never started, an enqueue replaces that job's
arguments and pushes its run_at to ``now + debounce`` (never past ``debounce_max`` after
the first enqueue), and returns that job's handle, instead of adding a job.

The key: ``debounce_key=`` is a string (one key for every call) or a callable of the
task's arguments returning a str; without it, the key is the identity of the arguments
(a hash of their JSON, keys sorted), so only enqueues with equal arguments fold into one
job. Enqueue options replace the task's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Protocol

from .._errors import TaskRegistrationError
from .._jobs import DebouncedJobSpec, JobSpec
from .._payload import MAX_KEY_BYTES, check_name

#: Longest debounce and debounce_max (about 31 years, as the longest countdown).
MAX_DEBOUNCE = timedelta(seconds=1e9)

DebounceKey = str | Callable[..., Any]

_JOB_FIELDS = tuple(field.name for field in dataclasses.fields(JobSpec))


@dataclasses.dataclass(frozen=True)
class Debounce:
    """A task's (or a call's) debounce options."""

    delay: timedelta
    key: DebounceKey | None = None
    max: timedelta | None = None


def _period(name: str, value: object, error: type[Exception]) -> timedelta | None:
    if value is None:
        return None
    if not isinstance(value, timedelta):
        raise error(
            f"{name}= must be a datetime.timedelta, e.g. timedelta(seconds=5), got {value!r}"
        )
    if value <= timedelta(0) or value > MAX_DEBOUNCE:
        raise error(f"{name}= must be a positive timedelta of at most 1e9 seconds, got {value!r}")
    return value


def check_debounce(
    delay: object, key: object, most: object, error: type[Exception]
) -> Debounce | None:
    """The options checked (None: not debounced); a key or max without a delay is refused."""
    period = _period("debounce", delay, error)
    longest = _period("debounce_max", most, error)
    if period is None:
        if key is not None or longest is not None:
            raise error(
                "debounce_key= and debounce_max= need debounce= (how long after the last"
                " enqueue the job runs), e.g. debounce=timedelta(seconds=5)"
            )
        return None
    if key is not None and not isinstance(key, str) and not callable(key):
        raise error(
            f"debounce_key= must be a str or a callable of the task's arguments returning"
            f" a str, got {key!r}"
        )
    if isinstance(key, str):
        try:
            check_name("debounce_key", key, MAX_KEY_BYTES)
        except ValueError as failure:
            raise error(str(failure)) from None
    if longest is not None and longest < period:
        raise error(f"debounce_max= ({longest!r}) must be at least debounce= ({period!r})")
    return Debounce(period, key, longest)


def task_debounce(task_name: str, options: Mapping[str, Any]) -> Debounce | None:
    """The task options debounce=, debounce_key=, debounce_max=, checked."""
    try:
        return check_debounce(
            options.get("debounce"),
            options.get("debounce_key"),
            options.get("debounce_max"),
            TaskRegistrationError,
        )
    except TaskRegistrationError as error:
        raise TaskRegistrationError(f"task {task_name!r}: {error}") from None


def _key_of(
    task: DebouncedTask,
    debounce: Debounce,
    spec: JobSpec,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> str:
    key = debounce.key
    if key is None:  # the arguments' identity
        canonical = json.dumps(
            [json.loads(spec.args_json), json.loads(spec.kwargs_json)],
            sort_keys=True,
            separators=(",", ":"),
        )
        return "args:" + hashlib.sha256(canonical.encode()).hexdigest()
    if isinstance(key, str):
        return key
    try:
        value = key(*args, **kwargs)
    except Exception as error:
        raise ValueError(
            f"task {task.name!r}: its debounce_key= callable raised {error!r} for"
            f" args={args!r} kwargs={kwargs!r}"
        ) from error
    if not isinstance(value, str):
        raise ValueError(
            f"task {task.name!r}: its debounce_key= callable must return a str, got {value!r}"
        )
    return check_name("debounce_key", value, MAX_KEY_BYTES)


def debounced_spec(
    task: DebouncedTask,
    spec: JobSpec,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    call: Debounce | None,
    *,
    scheduled: bool,
) -> JobSpec:
    """``spec`` debounced by the call's options, else the task's (``spec`` unchanged when
    neither debounces). ``scheduled``: the call gave countdown= or eta=."""
    debounce = call if call is not None else task.debounce
    if debounce is None:
        return spec
    conflicts = [
        what
        for what, present in (
            ("countdown=/eta=", scheduled),
            ("idempotency_key=", spec.idempotency_key is not None),
            ("a uniqueness scope", type(spec) is not JobSpec),
            ("concurrency or rate limits", spec.limit_groups is not None),
        )
        if present
    ]
    if conflicts:
        raise ValueError(
            f"task {task.name!r}: debounce= cannot be combined with {', '.join(conflicts)}:"
            " a debounced job runs debounce after the last enqueue of its key, and is"
            " found by that key alone; drop one of them"
        )
    fields = {name: getattr(spec, name) for name in _JOB_FIELDS}
    return DebouncedJobSpec(
        **fields,
        debounce_key=_key_of(task, debounce, spec, args, kwargs),
        debounce_seconds=debounce.delay.total_seconds(),
        debounce_max_seconds=None if debounce.max is None else debounce.max.total_seconds(),
    )


class DebouncedTask(Protocol):
    """What debouncing reads of a task."""

    @property
    def name(self) -> str: ...

    @property
    def debounce(self) -> Debounce | None: ...
