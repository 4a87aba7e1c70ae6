"""Task: a registered function plus its options; builds job rows (JobSpec) to enqueue."""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypedDict, TypeVar

import psycopg
from typing_extensions import ParamSpec, Unpack

from .._batches import Batch
from .._errors import TaskRegistrationError
from .._jobs import (
    EXECUTOR_NAMES,
    ExecutorName,
    JobBatch,
    JobContext,
    JobSpec,
    new_job_spec,
)
from .._payload import check_name, encode_arguments, encode_meta
from .._validation import (
    aware,
    schedule_of,
    validate_max_attempts,
    validate_priority,
    validate_queue,
    validate_text,
)
from .debounce import Debounce, DebounceKey, check_debounce, debounced_spec, task_debounce
from .handle import JobHandle
from .keyed import KeyedOptions, KeySource, SequenceOnFailure
from .limits import TaskLimits, job_limits
from .links import Expires, enqueue_linked, expires_at, meta_with_expiry, relative_expiry
from .task_checks import (
    ANY_ARGUMENTS,
    arguments_of,
    check_batch,
    positive_option,
    refuse_limited_batch,
    task_aliases,
)
from .task_names import MainModuleTaskWarning, default_task_name, main_module_warning
from .uniqueness import Uniqueness, UniqueWhile, scoped_spec, task_uniqueness
from .workflows import Signature

if TYPE_CHECKING:
    from .app import App

P = ParamSpec("P")
R = TypeVar("R")

#: Where a task's code runs: the worker's thread pool, its process pool, or its event loop.

_NO_NAMES: frozenset[str] = frozenset()


class TaskSettings(TypedDict, total=False):
    """Options of ``@app.task(...)`` other than ``bind``; every one may be omitted."""

    #: Stable name stored in job rows (default ``module.qualname``).
    name: str
    #: Queue the task's jobs go to unless ``apply_async(queue=...)`` says otherwise.
    queue: str
    #: Higher runs first within what one claim sees.
    priority: int
    #: Attempts before the job is failed (the first run counts).
    max_attempts: int
    #: Backoff base in seconds: attempt n waits about base * 2**(n-1).
    retry_backoff: float
    #: Backoff cap in seconds.
    retry_backoff_max: float
    #: Randomise each delay (full jitter between half and the whole delay).
    retry_jitter: bool
    #: Exceptions that fail the job at once instead of retrying.
    dont_retry: tuple[type[BaseException], ...]
    #: Seconds before a running attempt counts as failed (a process-executor task's child
    #: is killed; a coroutine is cancelled; a thread is abandoned, see docs/howto/executors.md).
    timeout: float | None
    #: Whether an attempt past ``timeout`` is retried like an error (True, the default)
    #: or fails the job at once (False: Celery's hard ``time_limit``).
    retry_timeouts: bool
    #: Seconds after which SoftTimeLimitExceeded is raised inside a sync task.
    soft_timeout: float | None
    #: "thread", "process" or "async" (default: async for ``async def``, else the worker's).
    executor: ExecutorName | None
    #: Most jobs of this task running at once across all workers (per key with
    #: ``concurrency_key``); see docs/howto/flow-control.md.
    concurrency: int | None
    #: A function of the task's arguments returning a str or int: ``concurrency`` applies
    #: to the jobs of each key separately.
    concurrency_key: Callable[..., Any] | None
    #: Most jobs of this task started per period across all workers: "100/m", "5/s", "1/h".
    rate_limit: str | None
    #: The job's key from its arguments (a callable returning a str) when the call passes
    #: no ``idempotency_key=``; unique for life unless unique_while= or unique_for= says.
    unique_key: Callable[..., str]
    #: "active": one pending or running job per key (docs/howto/flow-control.md).
    unique_while: UniqueWhile | None
    #: One job per key in each fixed window of this length (aligned to the epoch).
    unique_for: timedelta | None
    #: Former names: jobs enqueued under them (before a rename) run this task.
    aliases: Sequence[str]
    #: Start deadline of each job, in seconds (or a timedelta) after its enqueue: a job
    #: not started by then never runs and ends cancelled ("expired").
    expires: float | timedelta | None
    #: Debounce (docs/howto/flow-control.md): a job runs this long after the last enqueue
    #: of its key; an enqueue while it is pending replaces its arguments instead of adding one.
    debounce: timedelta | None
    #: The debounce key: a str, or a callable of the arguments (default: their identity).
    debounce_key: str | Callable[..., Any] | None
    #: The latest a debounced job runs, after the first enqueue of its key.
    debounce_max: timedelta | None
    #: Batch execution: the function takes a list of BatchJob (docs/howto/flow-control.md).
    batch: Batch | None
    #: Claims take turns across keys (a str, int or function of the arguments giving one).
    fair_key: KeySource | None
    #: Jobs of one key run one at a time, in enqueue order (docs/howto/flow-control.md).
    sequence_key: KeySource | None
    #: After a failed job of a sequence: "hold" (default), "continue" or "cancel".
    sequence_on_failure: SequenceOnFailure


class TaskOptions(TaskSettings, total=False):
    """Every option of ``@app.task(...)``."""

    #: Pass a JobContext as the first argument.
    bind: bool


class Task(Generic[P, R]):
    """A function registered with ``@app.task``.

    Calling the task runs the function here and now; ``delay`` and friends enqueue a job
    that a worker runs later.
    """

    def __init__(
        self, app: App, function: Callable[..., Any], **options: Unpack[TaskOptions]
    ) -> None:
        self.app = app
        self.function = function
        unknown = set(options) - set(TaskOptions.__optional_keys__)
        if unknown:
            raise TaskRegistrationError(
                f"unknown task option(s) {', '.join(sorted(unknown))}; accepted:"
                f" {', '.join(sorted(TaskOptions.__optional_keys__))}"
            )
        name = options.get("name")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise TaskRegistrationError(f"task name= must be a non-empty string, got {name!r}")
        self.name: str = name or default_task_name(function)
        try:
            check_name("task name", self.name)
        except ValueError as error:
            raise TaskRegistrationError(str(error)) from None
        if self.name.startswith("__main__."):
            warnings.warn(main_module_warning(self.name), MainModuleTaskWarning, stacklevel=4)
        try:
            self.queue: str = validate_queue(options.get("queue", app.default_queue))
            self.priority: int = validate_priority(options.get("priority", 0))
            self.max_attempts: int = validate_max_attempts(
                options.get("max_attempts", app.default_max_attempts)
            )
        except (TypeError, ValueError) as error:
            raise TaskRegistrationError(f"task {self.name!r}: {error}") from error
        self.bind: bool = bool(options.get("bind", False))
        self.aliases = task_aliases(self.name, options.get("aliases", ()))
        self.retry_backoff: float = options.get("retry_backoff", 1.0)
        self.retry_backoff_max: float = options.get("retry_backoff_max", 600.0)
        self.retry_jitter: bool = bool(options.get("retry_jitter", True))
        self.dont_retry: tuple[type[BaseException], ...] = tuple(options.get("dont_retry", ()))
        self.timeout: float | None = options.get("timeout")
        self.retry_timeouts: bool = bool(options.get("retry_timeouts", True))
        self.expires: float | timedelta | None = options.get("expires")
        if self.expires is not None:
            try:
                expires_at(self.expires, "task option expires=")
            except (TypeError, ValueError) as error:
                raise TaskRegistrationError(f"task {self.name!r}: {error}") from None
        positive_option("retry_backoff", self.retry_backoff)
        positive_option("retry_backoff_max", self.retry_backoff_max)
        positive_option("timeout", self.timeout, allow_none=True)
        for exception_type in self.dont_retry:
            if not (isinstance(exception_type, type) and issubclass(exception_type, BaseException)):
                raise TaskRegistrationError(
                    f"dont_retry= must hold exception classes, got {exception_type!r}"
                )
        self.is_async = inspect.iscoroutinefunction(function)
        self.soft_timeout: float | None = options.get("soft_timeout")
        positive_option("soft_timeout", self.soft_timeout, allow_none=True)
        self.executor: ExecutorName | None = options.get("executor")
        self._check_executor()
        #: Concurrency and rate limits (None: none; see limits.py).
        self.limits: TaskLimits | None = TaskLimits.from_options(self.name, options)
        self.uniqueness: Uniqueness | None = task_uniqueness(self.name, options)
        self.debounce: Debounce | None = task_debounce(self.name, options)
        self.batch: Batch | None = check_batch(self, options.get("batch"))
        self.keyed = KeyedOptions.from_options(self.name, options)
        # A batch task's jobs take any JSON arguments: its function takes their list.
        self.signature = ANY_ARGUMENTS if self.batch else inspect.signature(function)
        parameters = list(self.signature.parameters.values())
        if self.bind:
            if not parameters:
                raise TaskRegistrationError(
                    f"task {self.name!r} has bind=True but takes no context argument"
                )
            self.signature = self.signature.replace(parameters=parameters[1:])
        self.parameter_names = tuple(
            parameter.name
            for parameter in self.signature.parameters.values()
            if parameter.kind
            in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        )
        self._valid_shapes: set[tuple[int, frozenset[str]]] = set()
        self.__doc__ = function.__doc__
        self.__wrapped__ = function

    def _check_executor(self) -> None:
        """Reject option combinations no executor can honour, naming the fix."""
        executor = self.executor
        if executor is not None and executor not in EXECUTOR_NAMES:
            raise TaskRegistrationError(
                f"task {self.name!r}: executor= must be one of {', '.join(EXECUTOR_NAMES)},"
                f" got {executor!r}"
            )
        if self.is_async and executor in ("thread", "process"):
            raise TaskRegistrationError(
                f"task {self.name!r} is an async def and runs on the worker's event loop:"
                f" executor={executor!r} needs a plain def (omit executor= or use 'async')"
            )
        if not self.is_async and executor == "async":
            raise TaskRegistrationError(
                f"task {self.name!r}: executor='async' needs an async def function"
                " (use 'thread' or 'process' for a plain def)"
            )
        if self.soft_timeout is not None:
            if self.is_async:
                raise TaskRegistrationError(
                    f"task {self.name!r}: soft_timeout= applies to sync tasks; an async"
                    " task is cancelled at its timeout= (CancelledError is its soft signal)"
                )
            if self.timeout is not None and self.soft_timeout >= self.timeout:
                raise TaskRegistrationError(
                    f"task {self.name!r}: soft_timeout= ({self.soft_timeout:g} s) must be"
                    f" shorter than timeout= ({self.timeout:g} s)"
                )

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.queue}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function directly, in this process, without a job."""
        if self.bind:
            context = JobContext.direct(self.name, max_attempts=self.max_attempts, queue=self.queue)
            return self.function(context, *args, **kwargs)  # type: ignore[no-any-return]
        return self.function(*args, **kwargs)  # type: ignore[no-any-return]

    # -- building job rows --
    def _arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[str, str]:
        """Check arguments against the task's signature and encode them as JSON texts;
        raises before anything is written."""
        if not isinstance(args, (list, tuple)):
            raise TypeError(f"args must be a list or tuple, got {type(args).__name__}")
        # type() first: the ABC check of isinstance(..., Mapping) is slow for the common dict.
        if type(kwargs) is not dict and not isinstance(kwargs, Mapping):
            raise TypeError(f"kwargs must be a mapping, got {type(kwargs).__name__}")
        # Whether arguments bind depends only on their count and keyword names: check each
        # shape once (bulk enqueues repeat one shape thousands of times).
        shape = (len(args), frozenset(kwargs) if kwargs else _NO_NAMES)
        if shape not in self._valid_shapes:
            try:
                self.signature.bind(*args, **kwargs)
            except TypeError as error:
                raise TypeError(f"arguments do not match task {self.name!r}: {error}") from None
            if len(self._valid_shapes) < 1024:
                self._valid_shapes.add(shape)
        if not args and not kwargs:
            return "[]", "{}"
        return encode_arguments(
            self.name,
            args,
            kwargs,
            max_bytes=self.app.max_payload_bytes,
            parameter_names=self.parameter_names,
        )

    def build_spec(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        countdown: float | timedelta | None = None,
        eta: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        meta: Mapping[str, Any] | None = None,
        unique_while: UniqueWhile | None = None,
        unique_for: timedelta | None = None,
        tick_key: str | None = None,
        expires: Expires | None = None,
        debounce: Debounce | None = None,
        fair_key: KeySource | None = None,
        sequence_key: KeySource | None = None,
        sequence_on_failure: SequenceOnFailure | None = None,
    ) -> JobSpec:
        """Validate and encode one job; raises before anything is written.

        ``expires``: the start deadline (an aware datetime, or seconds or a timedelta from
        now; default the task's ``expires=``)."""
        kwargs = {} if kwargs is None else kwargs
        args_json, kwargs_json = self._arguments(args, kwargs)
        if countdown is None and eta is None:
            run_at, delay = None, None
        else:
            run_at, delay = schedule_of(countdown, eta)
        if idempotency_key is not None:
            validate_text("idempotency_key", idempotency_key)
        queue = self.queue if queue is None else validate_queue(queue)
        if self.limits is not None or self.app.queue_limits:
            limit_groups, limit_key = job_limits(
                self.limits, self.app.queue_limits.get(queue), args, kwargs
            )
            refuse_limited_batch(self, limit_groups)
        else:
            limit_groups, limit_key = None, None
        keyed = self.keyed.meta(args, kwargs, fair_key, sequence_key, sequence_on_failure)
        spec = new_job_spec(
            task_name=self.name,
            queue=queue,
            priority=self.priority if priority is None else validate_priority(priority),
            args_json=args_json,
            kwargs_json=kwargs_json,
            max_attempts=(
                self.max_attempts if max_attempts is None else validate_max_attempts(max_attempts)
            ),
            run_at=run_at,
            delay_seconds=delay,
            idempotency_key=idempotency_key,
            # None (nothing sent) for no meta or an empty one.
            meta_json=self._meta_json(meta, expires, keyed),
            limit_groups=None if limit_groups is None else tuple(limit_groups),
            limit_key=limit_key,
        )
        if (
            self.uniqueness is None
            and unique_while is None
            and unique_for is None
            and tick_key is None
        ):
            if debounce is None and self.debounce is None:
                return spec
            return debounced_spec(
                self,
                spec,
                args,
                kwargs,
                debounce,
                scheduled=delay is not None or run_at is not None,
            )
        if debounce is not None or self.debounce is not None:
            raise ValueError(f"task {self.name!r}: debounce= cannot be combined with unique keys")
        return scoped_spec(
            self,
            spec,
            args,
            kwargs,
            unique_while=unique_while,
            unique_for=unique_for,
            tick_key=tick_key,
        )

    def _meta_json(
        self,
        meta: Mapping[str, Any] | None,
        expires: Expires | None,
        reserved: Mapping[str, Any] | None = None,
    ) -> str | None:
        """The job's meta as JSON text, with its start deadline and fair/sequence keys."""
        chosen = expires if expires is not None else self.expires
        return meta_with_expiry(
            meta,
            expires_at(chosen),
            max_bytes=self.app.max_payload_bytes,
            relative=relative_expiry(chosen),
            reserved=reserved,
        )

    @staticmethod
    def _when(when: datetime | timedelta) -> dict[str, Any]:
        if isinstance(when, timedelta):
            return {"countdown": when}
        if isinstance(when, datetime):
            return {"eta": aware(when, "when")}
        raise TypeError(f"when must be an aware datetime or a timedelta, got {when!r}")

    def _many_specs(
        self, items: Iterable[Any], meta: Mapping[str, Any] | None = None
    ) -> Sequence[JobSpec]:
        """One spec per item of ``delay_many`` (a kwargs mapping or an (args, kwargs) pair).

        Without limits or a uniqueness scope the jobs differ only in their arguments: a
        JobBatch of their encoded arguments and the fields they share (build_spec per
        job cost twice the bulk insert's own work per job).
        """
        meta_json = (
            None
            if meta is None
            else encode_meta("meta", meta, max_bytes=self.app.max_payload_bytes)
        )
        if (
            self.limits is not None
            or self.uniqueness is not None
            or self.keyed.declared
            or self.app.queue_limits.get(self.queue) is not None
        ):
            specs = [self.build_spec(*arguments_of(item)) for item in items]
            if meta_json is None:
                return specs
            return [dataclasses.replace(spec, meta_json=meta_json) for spec in specs]
        arguments = self._arguments
        shared = new_job_spec(
            task_name=self.name,
            queue=self.queue,
            priority=self.priority,
            args_json="[]",
            kwargs_json="{}",
            max_attempts=self.max_attempts,
            run_at=None,
            delay_seconds=None,
            idempotency_key=None,
            meta_json=meta_json,
            limit_groups=None,
            limit_key=None,
        )
        return JobBatch(shared, [arguments(*arguments_of(item)) for item in items])

    # -- workflow steps --
    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A signature for a workflow step; after another step it receives that step's
        result as its first argument."""
        return Signature(self, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """An immutable signature: the step receives only the arguments given here."""
        return Signature(self, args, kwargs, immutable=True)

    # -- enqueue (sync) --
    def delay(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """Enqueue a job to run as soon as a worker is free."""
        return self.app.enqueue(self.build_spec(args, kwargs))

    def apply_at(
        self, when: datetime | timedelta, *args: P.args, **kwargs: P.kwargs
    ) -> JobHandle[R]:
        """Enqueue a job to run at ``when`` (aware datetime) or after ``when`` (timedelta)."""
        return self.app.enqueue(self.build_spec(args, kwargs, **self._when(when)))

    def apply_async(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        countdown: float | timedelta | None = None,
        eta: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        unique_while: UniqueWhile | None = None,
        unique_for: timedelta | None = None,
        connection: psycopg.Connection[Any] | None = None,
        meta: Mapping[str, Any] | None = None,
        expires: Expires | None = None,
        debounce: timedelta | None = None,
        debounce_key: DebounceKey | None = None,
        debounce_max: timedelta | None = None,
        link: Signature | Sequence[Signature] | None = None,
        link_error: Signature | None = None,
        fair_key: KeySource | None = None,
        sequence_key: KeySource | None = None,
        sequence_on_failure: SequenceOnFailure | None = None,
    ) -> JobHandle[R]:
        """Enqueue with every option; with ``connection=`` the row joins its transaction.

        ``meta``: a JSON object stored with the job (``job.meta``, ``ctx.meta``); keys
        starting with ``pgtasks.`` are reserved. ``expires``: a start deadline (aware
        datetime, or seconds/timedelta from now): not started by then, the job ends
        cancelled and never runs. ``debounce``, ``debounce_key``, ``debounce_max``: as the
        task options (docs/howto/flow-control.md, Debounce), replacing them. ``link``:
        signatures enqueued when the job succeeds (a mutable one receives its result
        first); ``link_error``: a signature enqueued when it fails for good (a mutable one
        receives a dict describing the failure first).
        """
        if link is not None or link_error is not None:
            return enqueue_linked(self, args, kwargs, locals())
        spec = self.build_spec(
            args,
            kwargs,
            countdown=countdown,
            eta=eta,
            priority=priority,
            queue=queue,
            idempotency_key=idempotency_key,
            max_attempts=max_attempts,
            meta=meta,
            unique_while=unique_while,
            unique_for=unique_for,
            expires=expires,
            debounce=check_debounce(debounce, debounce_key, debounce_max, ValueError),
            fair_key=fair_key,
            sequence_key=sequence_key,
            sequence_on_failure=sequence_on_failure,
        )
        return self.app.enqueue(spec, connection=connection)

    def delay_many(
        self,
        items: Iterable[Mapping[str, Any] | tuple[Sequence[Any], Mapping[str, Any]]],
        *,
        connection: psycopg.Connection[Any] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> list[JobHandle[R]]:
        """Enqueue many jobs in one round trip per batch; handles come back in order.

        ``meta`` is stored with every job of the batch (for per-job meta, build specs with
        ``build_spec(..., meta=...)`` and pass them to ``app.enqueue_many``).
        """
        return self.app.enqueue_many(self._many_specs(items, meta), connection=connection)

    # -- enqueue (async) --
    async def adelay(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        return await self.app.aenqueue(self.build_spec(args, kwargs))

    async def aapply_at(
        self, when: datetime | timedelta, *args: P.args, **kwargs: P.kwargs
    ) -> JobHandle[R]:
        return await self.app.aenqueue(self.build_spec(args, kwargs, **self._when(when)))

    async def aapply_async(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        countdown: float | timedelta | None = None,
        eta: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        unique_while: UniqueWhile | None = None,
        unique_for: timedelta | None = None,
        connection: psycopg.AsyncConnection[Any] | None = None,
        meta: Mapping[str, Any] | None = None,
        expires: Expires | None = None,
        debounce: timedelta | None = None,
        debounce_key: DebounceKey | None = None,
        debounce_max: timedelta | None = None,
        fair_key: KeySource | None = None,
        sequence_key: KeySource | None = None,
        sequence_on_failure: SequenceOnFailure | None = None,
    ) -> JobHandle[R]:
        spec = self.build_spec(
            args,
            kwargs,
            countdown=countdown,
            eta=eta,
            priority=priority,
            queue=queue,
            idempotency_key=idempotency_key,
            max_attempts=max_attempts,
            meta=meta,
            unique_while=unique_while,
            unique_for=unique_for,
            expires=expires,
            debounce=check_debounce(debounce, debounce_key, debounce_max, ValueError),
            fair_key=fair_key,
            sequence_key=sequence_key,
            sequence_on_failure=sequence_on_failure,
        )
        return await self.app.aenqueue(spec, connection=connection)

    async def adelay_many(
        self,
        items: Iterable[Mapping[str, Any] | tuple[Sequence[Any], Mapping[str, Any]]],
        *,
        connection: psycopg.AsyncConnection[Any] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> list[JobHandle[R]]:
        return await self.app.aenqueue_many(self._many_specs(items, meta), connection=connection)
