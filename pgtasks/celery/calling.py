"""Calling tasks: ``apply_async`` / ``delay`` / ``send_task`` onto pgtasks' enqueue, and
Celery's eager execution (``task_always_eager``, ``task.apply()``)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .._app import workflows as native_workflows
from .._jobs import new_job_spec
from .._payload import encode_arguments, encode_meta
from .._retry import Retry as NativeRetry
from .config import CeleryCompatibilityWarning
from .exceptions import ImproperlyConfigured
from .result import AsyncResult, EagerResult
from .task import (
    ErrorRequest,
    Request,
    current_request,
    new_task_id,
    register_native,
    run_body,
)

if TYPE_CHECKING:
    from .app import Celery
    from .task import Task

#: apply_async options that mean nothing here (a broker's): warned about by name.
BROKER_OPTIONS = (
    "exchange",
    "routing_key",
    "exchange_type",
    "delivery_mode",
    "mandatory",
    "immediate",
    "compression",
    "retry",
    "retry_policy",
    "producer",
    "connection",
    "add_to_parent",
    "publisher",
    "reply_to",
    "group_id",
    "chord",
    "root_id",
    "parent_id",
    "stamped_headers",
    "ignore_result",
)
#: Per-call options pgtasks cannot honour for one job: warned about by name.
TASK_ONLY_OPTIONS = ("time_limit", "soft_time_limit")


def utc(moment: Any) -> Any:
    """A naive datetime as UTC (Celery's reading with enable_utc); anything else as is."""
    if isinstance(moment, datetime) and moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    return moment


def _warn(names: Sequence[str], why: str) -> None:
    for name in names:
        warnings.warn(
            f"apply_async option {name!r} has no effect on pgtasks: {why}",
            CeleryCompatibilityWarning,
            stacklevel=4,
        )


def native_call_options(
    app: Celery, options: Mapping[str, Any], task_id: str | None, shadow: str | None
) -> dict[str, Any]:
    """pgtasks' apply_async keywords from Celery's; bad options raise, broker ones warn."""
    options = dict(options)
    serializer = options.pop("serializer", None)
    if serializer not in (None, "json"):
        raise ImproperlyConfigured(
            f"serializer={serializer!r}: pgtasks stores arguments as JSON only"
        )
    _warn([name for name in BROKER_OPTIONS if name in options], "there is no broker")
    _warn(
        [name for name in TASK_ONLY_OPTIONS if name in options],
        "time limits are task options here (@app.task(time_limit=...))",
    )
    unknown = set(options) - {"countdown", "eta", "expires", "queue", "priority", "headers"}
    unknown -= set(BROKER_OPTIONS) | set(TASK_ONLY_OPTIONS)
    if unknown:
        raise TypeError(f"apply_async() got unknown option(s): {', '.join(sorted(unknown))}")
    call: dict[str, Any] = {}
    for name in ("countdown", "queue", "priority"):
        if options.get(name) is not None:
            call[name] = options[name]
    if options.get("eta") is not None:
        call["eta"] = utc(options["eta"])
    if options.get("expires") is not None:
        call["expires"] = utc(options["expires"])
    meta: dict[str, Any] = {}
    if options.get("headers"):
        meta["celery.headers"] = dict(options["headers"])
    if shadow:
        meta["celery.shadow"] = shadow
    if meta:
        call["meta"] = meta
    if task_id is not None:
        call["idempotency_key"] = str(task_id)
    return call


def apply_async(
    task: Task,
    args: Sequence[Any] | None,
    kwargs: Mapping[str, Any] | None,
    *,
    task_id: str | None,
    link: Any,
    link_error: Any,
    shadow: str | None,
    **options: Any,
) -> AsyncResult | EagerResult:
    app = task.app
    args, kwargs = tuple(args or ()), dict(kwargs or {})
    if app.conf.task_always_eager:
        return apply_eagerly(task, args, kwargs, task_id=task_id, link=link, link_error=link_error)
    native_task = register_native(task)
    call = native_call_options(app, options, task_id, shadow)
    if link is not None:
        links = link if isinstance(link, (list, tuple)) else [link]
        call["link"] = [app.to_native(item) for item in links]
    if link_error is not None:
        call["link_error"] = error_callback(app, link_error)
    handle = native_task.apply_async(args, kwargs, **call)
    return AsyncResult(str(handle.id), app=app, task_name=task.name)


class RequestErrback(native_workflows.Signature):
    """A native on_error signature whose job receives Celery's (request, exc, traceback)
    in JSON form first (the workflow's input mode 'request'), not the failure dict."""

    __slots__ = ()
    error_input = "request"


def error_callback(app: Celery, link_error: Any) -> Any:
    """The native on_error signature of a Celery ``link_error``: its job is the error
    callback itself, started with Celery's (request, exc, traceback) in JSON form."""
    items = link_error if isinstance(link_error, (list, tuple)) else [link_error]
    if len(items) != 1 or not isinstance(items[0], dict) or "subtask_type" not in items[0]:
        raise TypeError(f"link_error= must be one signature, got {link_error!r}")
    native = app.to_native(items[0])
    return RequestErrback(
        native.task, native.args, native.kwargs, immutable=native.immutable, options=native.options
    )


def send_task(
    app: Celery,
    name: str,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    *,
    task_id: str | None = None,
    shadow: str | None = None,
    **options: Any,
) -> AsyncResult:
    """Enqueue a job of task ``name``, registered here or not (a task of another code
    base): its arguments are checked only to be JSON."""
    if name in app.tasks:
        return app.tasks[name].apply_async(args, kwargs, task_id=task_id, shadow=shadow, **options)
    native = app.native
    call = native_call_options(app, options, task_id, shadow)
    if "expires" in call or "link" in options or "link_error" in options:
        raise ImproperlyConfigured(
            f"send_task({name!r}): expires=, link= and link_error= need the task registered"
            " in this process (import its module)"
        )
    args_json, kwargs_json = encode_arguments(
        name, tuple(args or ()), dict(kwargs or {}), max_bytes=native.max_payload_bytes
    )
    from .._validation import schedule_of

    run_at, delay = schedule_of(call.get("countdown"), call.get("eta"))
    spec = new_job_spec(
        task_name=name,
        queue=call.get("queue") or app.route_of(name) or app.conf.task_default_queue,
        priority=int(call.get("priority") or app.conf.task_default_priority or 0),
        args_json=args_json,
        kwargs_json=kwargs_json,
        max_attempts=4,
        run_at=run_at,
        delay_seconds=delay,
        idempotency_key=call.get("idempotency_key"),
        meta_json=encode_meta("meta", call.get("meta"), max_bytes=native.max_payload_bytes),
        limit_groups=None,
        limit_key=None,
    )
    handle = native.enqueue(spec)
    return AsyncResult(str(handle.id), app=app, task_name=name)


def apply_eagerly(
    task: Task,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    task_id: str | None = None,
    link: Any = None,
    link_error: Any = None,
) -> EagerResult:
    """Run the task here, retries included at once (as Celery's eager mode does); the
    exception propagates with task_eager_propagates, else it is the result's."""
    task_id = task_id or new_task_id()
    parent = current_request()
    request = Request(
        id=task_id,
        task=task.name,
        args=list(args),
        kwargs=dict(kwargs),
        is_eager=True,
        called_directly=False,
        delivery_info={"is_eager": True, "routing_key": task.queue},
        parent_id=parent.id if parent is not None else None,
    )
    while True:
        try:
            value = run_body(task, request, args, kwargs)
        except NativeRetry:
            request.retries += 1
            continue
        except BaseException as error:
            if link_error is not None:
                _eager_errback(link_error, request, error)
            if task.app.conf.task_eager_propagates:
                raise
            return EagerResult(task_id, error, "FAILURE", name=task.name)
        break
    for callback in (link if isinstance(link, (list, tuple)) else [link]) if link else []:
        callback.apply((value,) if not callback.immutable else ())
    return EagerResult(task_id, value, "SUCCESS", name=task.name)


def _eager_errback(link_error: Any, request: Request, error: BaseException) -> None:
    import traceback

    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    exc_text = f"{type(error).__name__}: {error}"
    for errback in link_error if isinstance(link_error, (list, tuple)) else [link_error]:
        failed = ErrorRequest(request_dict(request))
        arguments = () if errback.immutable else (failed, exc_text, text)
        errback.apply(arguments)


def request_dict(request: Request) -> dict[str, Any]:
    """The JSON form of a request an error callback receives."""
    return {
        "id": request.id,
        "task": request.task,
        "args": list(request.args),
        "kwargs": dict(request.kwargs),
        "retries": request.retries,
        "delivery_info": dict(request.delivery_info),
        "hostname": request.hostname,
        "is_eager": request.is_eager,
    }
