"""Start deadlines (``expires=``) and callbacks (``link=``, ``link_error=``) of an enqueue.

A deadline is kept in the job's meta under the reserved key ``pgtasks.expires`` (seconds
since the epoch): every claim (the limited one too) leaves the job out once it has
passed, and the worker's expiry pass ends it cancelled with the reason. A relative
deadline (seconds or a timedelta) also writes ``pgtasks.expires_in``: the insert trigger
turns it into ``pgtasks.expires`` on the database's clock, so an
enqueuer's clock skew does not move the deadline (the enqueuer's estimate is what a
schema without the trigger keeps).

A job with callbacks is a small workflow, so that they run exactly once, as jobs, in the
transaction that ends the job (the workflow triggers): ``link`` signatures follow the job
(a mutable one receives its result first), ``link_error`` is the workflow's on_error job
(a mutable one receives the dict describing the failure: workflow_id, job_id, task_name,
step, status, error). ``pgtasks.celery`` turns that dict into Celery's
``(request, exception, traceback)``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .._errors import NaiveDatetimeError, WorkflowError
from .._payload import encode_meta
from .._validation import schedule_of
from .handle import JobHandle

if TYPE_CHECKING:
    from .tasks import Task
    from .workflows import Signature

#: The meta key of a job's start deadline (seconds since the epoch).
EXPIRES_KEY = "pgtasks.expires"
#: The meta key of a relative deadline (seconds after the insert, database clock).
EXPIRES_IN_KEY = "pgtasks.expires_in"

Expires = float | int | timedelta | datetime


def relative_expiry(expires: Expires | None, what: str = "expires") -> float | None:
    """The seconds from now of a relative deadline (a number or a timedelta), checked;
    None for none or an aware datetime (checked too)."""
    if expires is None:
        return None
    if isinstance(expires, datetime):
        if expires.tzinfo is None or expires.tzinfo.utcoffset(expires) is None:
            raise NaiveDatetimeError(
                f"{what} is a naive datetime ({expires.isoformat()}): pgtasks cannot tell"
                " which time zone it is in; pass an aware datetime, e.g."
                " datetime.now(timezone.utc) + timedelta(minutes=5), or seconds"
            )
        return None
    if isinstance(expires, timedelta):
        seconds = expires.total_seconds()
    elif isinstance(expires, (int, float)) and not isinstance(expires, bool):
        seconds = float(expires)
    else:
        raise TypeError(
            f"{what} must be seconds, a timedelta or an aware datetime, got {expires!r}"
        )
    if not math.isfinite(seconds) or abs(seconds) > 1e9:
        raise ValueError(f"{what} must be a finite number of seconds within ±1e9, got {expires!r}")
    return seconds


def expires_at(expires: Expires | None, what: str = "expires") -> float | None:
    """The deadline as seconds since the epoch: an aware datetime, or seconds (a number or
    a timedelta) from now on this process's clock (the estimate: the database computes
    a relative deadline at the insert, see :func:`meta_with_expiry`); None for none."""
    seconds = relative_expiry(expires, what)
    if seconds is not None:
        return time.time() + seconds
    if isinstance(expires, datetime):
        return expires.timestamp()
    return None


def meta_with_expiry(
    meta: Mapping[str, Any] | None,
    deadline: float | None,
    *,
    max_bytes: int,
    relative: float | None = None,
    reserved: Mapping[str, Any] | None = None,
) -> str | None:
    """The job's meta as JSON text, with the deadline under its reserved key (and, for a
    relative one, its seconds, which the insert turns into the deadline on the database's
    clock) and the other ``reserved`` entries (fair and sequence keys); the caller's keys
    are checked as any meta's are (no ``pgtasks.`` key)."""
    encoded = encode_meta("meta", meta, max_bytes=max_bytes)
    if deadline is None and not reserved:
        return encoded
    values = json.loads(encoded) if encoded is not None else {}
    if deadline is not None:
        values[EXPIRES_KEY] = deadline
        if relative is not None:
            values[EXPIRES_IN_KEY] = relative
    values.update(reserved or {})
    return encode_meta("meta", values, max_bytes=max_bytes, internal=True)


def _signatures(value: Any, what: str) -> list[Signature]:
    from .workflows import Signature

    items = list(value) if isinstance(value, (list, tuple)) else [value]
    for item in items:
        if not isinstance(item, Signature):
            raise WorkflowError(f"{what} must be a signature (task.s() or task.si()), got {item!r}")
    return items


def enqueue_linked(
    task: Task[Any, Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None,
    call: Mapping[str, Any],
) -> JobHandle[Any]:
    """``apply_async`` with ``link=``/``link_error=`` (``call``: its arguments): the job
    and its callbacks as one workflow, in one transaction; the handle of the job itself."""
    from .workflows import Canvas, Chain, Group, Signature, enqueue_workflow

    unsupported = [
        name
        for name in (
            "idempotency_key",
            "unique_while",
            "unique_for",
            "fair_key",
            "sequence_key",
            "sequence_on_failure",
            "debounce",
        )
        if call.get(name) is not None
    ]
    if unsupported:
        raise ValueError(
            f"apply_async: {', '.join(unsupported)} cannot be combined with link= or"
            " link_error= (a job with callbacks is a workflow, whose steps take no key);"
            " enqueue the callbacks from the task instead"
        )
    schedule = schedule_of(call.get("countdown"), call.get("eta"))
    options = {
        name: call[name]
        for name in ("queue", "priority", "max_attempts")
        if call.get(name) is not None
    }
    first = Signature(task, args, kwargs, options=options)
    link, link_error = call.get("link"), call.get("link_error")
    links = _signatures(link, "link=") if link is not None else []
    errors = _signatures(link_error, "link_error=") if link_error is not None else []
    if len(errors) > 1:
        raise WorkflowError(
            "link_error= takes one error callback here (a job's failure starts one job);"
            " call the others from it"
        )
    steps: list[Canvas] = [first]
    if links:
        steps.append(links[0] if len(links) == 1 else Group(links))
    root = Chain(*steps)
    result = enqueue_workflow(
        root,
        connection=call.get("connection"),
        on_error=errors[0] if errors else None,
        first_meta=task._meta_json(call.get("meta"), call.get("expires")),
        first_schedule=schedule,
    )
    return JobHandle(result.app, result.job_ids[0])
