"""``Task``: Celery's task class (options, ``self.request``, ``self.retry``, hooks) over a
pgtasks task.

Each Celery task is registered with the pgtasks App under its name as a bound task whose
function (``_execute``) sets ``self.request`` from the job's context, runs ``run`` and
maps Celery's control flow onto pgtasks' outcomes: ``Retry`` (pgtasks' own retry) runs
the job again after its countdown, ``autoretry_for`` exceptions retry with Celery's
backoff, any other exception fails the job at once (as a Celery task without retries
does), ``Ignore`` ends it done, ``Reject(requeue=True)`` runs it again.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import logging
import random
import socket
import traceback
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from .._jobs import JobContext
from .._progress import check_meta_patch, progress_patch
from .._retry import Retry as NativeRetry
from .exceptions import Ignore, MaxRetriesExceededError, Reject, Retry
from .states import FAILURE, RETRY, STARTED, SUCCESS

if TYPE_CHECKING:
    from .._app.tasks import Task as NativeTask
    from .app import Celery
    from .canvas import Signature
    from .result import AsyncResult, EagerResult

logger = logging.getLogger("pgtasks.celery")

#: The request of the task running in this thread or coroutine (Celery's request stack).
_current: contextvars.ContextVar[Request | None] = contextvars.ContextVar(
    "pgtasks_celery_request", default=None
)
#: Attempts of a task whose max_retries is None ("forever"): the largest a job holds.
FOREVER = 2**31 - 1
#: Task options of Celery that pgtasks maps (class attributes of Task).
TASK_OPTIONS = (
    "name",
    "bind",
    "typing",
    "max_retries",
    "default_retry_delay",
    "rate_limit",
    "ignore_result",
    "time_limit",
    "soft_time_limit",
    "acks_late",
    "autoretry_for",
    "dont_autoretry_for",
    "retry_kwargs",
    "retry_backoff",
    "retry_backoff_max",
    "retry_jitter",
    "queue",
    "priority",
    "expires",
    "serializer",
    "track_started",
    "store_errors_even_if_ignored",
    "trail",
    "reject_on_worker_lost",
    "shared",
    "base",
    "lazy",
    "pydantic",
)


class ErrorRequest(dict[str, Any]):
    """The request an error callback (``link_error``) receives: the failed task's request
    in JSON form (a dict), whose keys read as attributes too (``request.id``), as Celery's
    request object's do."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def current_request() -> Request | None:
    return _current.get()


class Request:
    """``self.request``: what Celery's task request holds, from the running job."""

    def __init__(self, **fields: Any) -> None:
        self.id: str | None = None
        self.task: str | None = None
        self.retries = 0
        self.args: list[Any] = []
        self.kwargs: dict[str, Any] = {}
        self.delivery_info: dict[str, Any] = {}
        self.hostname: str | None = None
        self.eta: str | None = None
        self.expires: str | None = None
        self.is_eager = False
        self.called_directly = True
        self.headers: dict[str, Any] | None = None
        self.root_id: str | None = None
        self.parent_id: str | None = None
        self.group: str | None = None
        self.timelimit = (None, None)
        self.context: JobContext | None = None
        self.__dict__.update(fields)

    def get(self, name: str, default: Any = None) -> Any:
        return self.__dict__.get(name, default)

    def as_dict(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items() if key != "context"}

    def __repr__(self) -> str:
        return f"<Request {self.task}[{self.id}] retries={self.retries}>"


def backoff_delay(task: Task, retries: int) -> float:
    """Celery's ``retry_backoff``: factor * 2**retries, capped, with full jitter."""
    factor = 1.0 if task.retry_backoff is True else float(task.retry_backoff)
    delay: float = min(float(task.retry_backoff_max), factor * (2.0**retries))
    if task.retry_jitter:
        delay = random.uniform(0, delay)  # noqa: S311 - spreading retries, not security
    return delay


class Task:
    """A Celery task. Subclass it (``base=``) for ``on_success``/``on_failure``/
    ``on_retry``/``after_return``/``before_start`` hooks and class-level options."""

    name: str | None = None
    app: Celery
    typing = True
    max_retries: int | None = 3
    default_retry_delay: float = 180
    rate_limit: str | int | None = None
    ignore_result = False
    time_limit: float | None = None
    soft_time_limit: float | None = None
    acks_late: bool | None = None
    autoretry_for: tuple[type[BaseException], ...] = ()
    dont_autoretry_for: tuple[type[BaseException], ...] = ()
    retry_kwargs: ClassVar[dict[str, Any]] = {}
    retry_backoff: bool | int | float = False
    retry_backoff_max: float = 600
    retry_jitter = True
    queue: str | None = None
    priority: int | None = None
    expires: Any = None
    serializer = "json"
    bind = False
    MaxRetriesExceededError = MaxRetriesExceededError

    # -- the body --
    def run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("a Task subclass must define run()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the body here and now (as Celery does), with a request of its own."""
        if _current.get() is not None:
            return self.run(*args, **kwargs)
        token = _current.set(Request(task=self.name, args=list(args), kwargs=dict(kwargs)))
        try:
            return self.run(*args, **kwargs)
        finally:
            _current.reset(token)

    def __repr__(self) -> str:
        return f"<@task: {self.name} of {self.app.main}>"

    @property
    def request(self) -> Request:
        request = _current.get()
        return request if request is not None else Request(task=self.name)

    @property
    def __name__(self) -> str:
        return str(self.name).rsplit(".", 1)[-1]

    # -- hooks (override in a base class) --
    def before_start(self, task_id: str, args: Any, kwargs: Any) -> None:
        """Before the body runs."""

    def on_success(self, retval: Any, task_id: str, args: Any, kwargs: Any) -> None:
        """After the body returned."""

    def on_failure(
        self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any
    ) -> None:
        """After the body raised (and the job fails)."""

    def on_retry(
        self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any
    ) -> None:
        """After the body asked for a retry."""

    def after_return(
        self, status: str, retval: Any, task_id: str, args: Any, kwargs: Any, einfo: Any
    ) -> None:
        """After the body ended, whatever the outcome."""

    # -- retries --
    def retry(
        self,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        exc: BaseException | None = None,
        throw: bool = True,
        eta: Any = None,
        countdown: float | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> Retry:
        """Retry the running task (raises Retry); past ``max_retries`` re-raise ``exc``
        (when given) or raise MaxRetriesExceededError, as Celery does."""
        request = self.request
        if request.called_directly:
            if exc is not None:
                raise exc
            raise Retry("Task can be retried", None)
        if args is not None or kwargs is not None:
            same = (args is None or list(args) == list(request.args)) and (
                kwargs is None or dict(kwargs) == dict(request.kwargs)
            )
            if not same:
                raise ValueError(
                    "self.retry(args=..., kwargs=...) with other arguments: a pgtasks retry"
                    " runs the same job again; enqueue a new job with the new arguments"
                )
        limit = self.max_retries if max_retries is None else max_retries
        if limit is not None and request.retries >= limit:
            if exc is not None:
                raise exc
            raise self.MaxRetriesExceededError(
                f"Can't retry {self.name}[{request.id}] args:{request.args}"
                f" kwargs:{request.kwargs}",
                task_args=request.args,
                task_kwargs=request.kwargs,
            )
        if countdown is None and eta is None:
            countdown = self.default_retry_delay
        # A per-call max_retries may be above the task's (the job's max_attempts): this
        # retry carries its own limit. None (forever) leaves the job's, which is forever.
        retry = Retry(
            exc=exc,
            when=eta if eta is not None else countdown,
            max_attempts=None if limit is None else min(limit + 1, FOREVER),
        )
        if throw:
            raise retry
        return retry

    # -- calling --
    def delay(self, *args: Any, **kwargs: Any) -> AsyncResult | EagerResult:
        return self.apply_async(args, kwargs)

    def apply_async(
        self,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        task_id: str | None = None,
        link: Any = None,
        link_error: Any = None,
        shadow: str | None = None,
        **options: Any,
    ) -> AsyncResult | EagerResult:
        """Enqueue a job (or, with task_always_eager, run it here); see calling.py."""
        return self.app.apply_task_async(
            self,
            args,
            kwargs,
            task_id=task_id,
            link=link,
            link_error=link_error,
            shadow=shadow,
            **options,
        )

    def apply(
        self,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        task_id: str | None = None,
        **options: Any,
    ) -> EagerResult:
        """Run the task here and now, retries included (Celery's eager execution)."""
        return self.app.apply_task_eagerly(self, args or (), kwargs or {}, task_id=task_id)

    def AsyncResult(self, task_id: str | int) -> AsyncResult:
        return self.app.AsyncResult(task_id)  # type: ignore[no-any-return]

    def update_state(
        self, task_id: str | None = None, state: str | None = None, meta: Any = None
    ) -> None:
        """Record a state and its meta for the running job (``AsyncResult.state``/``.info``;
        the dashboard shows them in the job's meta, ``current``/``total`` as progress)."""
        request = self.request
        context = request.context
        if context is None or (task_id is not None and task_id != request.id):
            raise ValueError(
                "update_state() records the running task's own state: call it inside the"
                " task, without task_id= or with self.request.id"
            )
        patch = check_meta_patch({"celery.state": state or STARTED, "celery.info": meta})
        if isinstance(meta, Mapping) and "current" in meta and "total" in meta:
            current, total = meta["current"], meta["total"]
            if isinstance(current, (int, float)) and isinstance(total, (int, float)):
                # Not a finite number: the state and its meta, without progress.
                with contextlib.suppress(ValueError):
                    patch.update(progress_patch(current, total, None))
        # One fenced UPDATE: a reader never sees the new state without its progress.
        context.write_meta(patch)

    # -- canvas --
    def s(self, *args: Any, **kwargs: Any) -> Signature:
        return self.app.signature_of(self, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        return self.app.signature_of(self, args, kwargs, immutable=True)

    def signature(
        self,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        *starargs: Any,
        **options: Any,
    ) -> Signature:
        immutable = bool(options.pop("immutable", False))
        return self.app.signature_of(
            self, args or (), kwargs or {}, options=options, immutable=immutable
        )

    subtask = signature

    def map(self, it: Iterable[Any]) -> Signature:
        return self.app.canvas_of("map", self, it)

    def starmap(self, it: Iterable[Any]) -> Signature:
        return self.app.canvas_of("starmap", self, it)

    def chunks(self, it: Iterable[Any], n: int) -> Any:
        return self.app.canvas_of("chunks", self, it, n)

    # -- the pgtasks side --
    def native_options(self) -> dict[str, Any]:
        """The pgtasks task options of this task (its Celery options mapped)."""
        conf = self.app.conf
        options: dict[str, Any] = {"name": self.name, "dont_retry": (Exception,)}
        options["queue"] = (
            self.queue or self.app.route_of(str(self.name)) or conf.task_default_queue
        )
        priority = self.priority if self.priority is not None else conf.task_default_priority
        if priority is not None:
            options["priority"] = int(priority)
        options["max_attempts"] = FOREVER if self.max_retries is None else self.max_retries + 1
        time_limit = self.time_limit if self.time_limit is not None else conf.task_time_limit
        soft = (
            self.soft_time_limit if self.soft_time_limit is not None else conf.task_soft_time_limit
        )
        if time_limit is not None:
            # Celery's hard limit fails the task (TimeLimitExceeded), never retries it.
            options["timeout"] = float(time_limit)
            options["retry_timeouts"] = False
        if soft is not None:
            options["soft_timeout"] = float(soft)
        rate = self.rate_limit if self.rate_limit is not None else conf.task_default_rate_limit
        if rate is not None:
            options["rate_limit"] = f"{rate}/s" if isinstance(rate, (int, float)) else rate
        if self.expires is not None:
            options["expires"] = self.expires
        return options


def _einfo(error: BaseException) -> str:
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))


def _delivery_info(context: JobContext, priority: int | None) -> dict[str, Any]:
    return {
        "exchange": "",
        "routing_key": context.queue,
        "queue": context.queue,
        "priority": priority,
        "redelivered": context.attempt > 1,
    }


def run_body(task: Task, request: Request, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """Run the body under ``request`` with the hooks; Celery's control flow in, pgtasks'
    out (``_execute``'s docstring)."""
    task_id = str(request.id)
    token = _current.set(request)
    try:
        task.before_start(task_id, args, kwargs)
        try:
            retval = task.run(*args, **kwargs)
        except Retry as retry:
            cause = retry.exc or retry
            task.on_retry(cause, task_id, args, kwargs, _einfo(cause))
            task.after_return(RETRY, retry, task_id, args, kwargs, _einfo(cause))
            raise
        except Ignore:
            return None
        except Reject as reject:
            if reject.requeue:
                raise NativeRetry(0, f"Reject(requeue=True): {reject.reason!r}") from reject
            raise
        except BaseException as error:
            try:
                again = _autoretry(task, error)
            except BaseException as final:  # out of retries: the exception itself
                _failed(task, final, task_id, args, kwargs)
                raise
            if again is not None:
                task.on_retry(error, task_id, args, kwargs, _einfo(error))
                raise again from error
            _failed(task, error, task_id, args, kwargs)
            raise
        task.on_success(retval, task_id, args, kwargs)
        task.after_return(SUCCESS, retval, task_id, args, kwargs, None)
        return retval
    finally:
        _current.reset(token)


def _failed(
    task: Task, error: BaseException, task_id: str, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> None:
    task.on_failure(error, task_id, args, kwargs, _einfo(error))
    task.after_return(FAILURE, error, task_id, args, kwargs, _einfo(error))


def _autoretry(task: Task, error: BaseException) -> Retry | None:
    """The Retry ``autoretry_for`` makes of ``error`` (None: not one of them); past the
    retries, Celery re-raises the exception itself (so does this: it raises it)."""
    if not task.autoretry_for or not isinstance(error, task.autoretry_for):
        return None
    if task.dont_autoretry_for and isinstance(error, task.dont_autoretry_for):
        return None
    if not isinstance(error, Exception):
        return None
    options = dict(task.retry_kwargs)
    if task.retry_backoff and "countdown" not in options:
        options["countdown"] = backoff_delay(task, task.request.retries)
    return task.retry(exc=error, throw=False, **options)


def native_function(task: Task) -> Callable[..., Any]:
    """The function registered with pgtasks (bound: it receives the JobContext first),
    with the body's signature for pgtasks' argument checks."""
    hostname = socket.gethostname()

    def _execute(context: JobContext, *args: Any, **kwargs: Any) -> Any:
        # An error callback's job: its first argument is the failed task's request.
        errback = context.meta.get("pgtasks.error_input") == "request"
        if errback and args and isinstance(args[0], dict):
            args = (ErrorRequest(args[0]), *args[1:])
        request = Request(
            id=str(context.job_id),
            task=task.name,
            retries=max(context.attempt - 1, 0),
            args=list(args),
            kwargs=dict(kwargs),
            delivery_info=_delivery_info(context, task.priority),
            hostname=f"pgtasks@{hostname}",
            is_eager=False,
            called_directly=False,
            context=context,
        )
        return run_body(task, request, args, kwargs)

    body = inspect.signature(task.run)
    context_parameter = inspect.Parameter("context", inspect.Parameter.POSITIONAL_ONLY)
    _execute.__signature__ = body.replace(  # type: ignore[attr-defined]
        parameters=[context_parameter, *body.parameters.values()]
    )
    _execute.__module__ = getattr(task.run, "__module__", __name__)
    _execute.__qualname__ = str(task.name)
    _execute.__doc__ = task.run.__doc__
    return _execute


def register_native(task: Task) -> NativeTask[Any, Any]:
    """Register ``task`` with its app's pgtasks App (once)."""
    native = task.app.native
    existing = native.tasks.get(str(task.name))
    if existing is not None and getattr(existing, "celery_task", None) is task:
        return existing
    from .._app.app import register_task

    handle = register_task(native, native_function(task), bind=True, options=task.native_options())
    handle.celery_task = task  # type: ignore[attr-defined]
    return handle


def new_task_id() -> str:
    return str(uuid.uuid4())
