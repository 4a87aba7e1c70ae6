"""Durable execution inside a task: the user's API on JobContext and its exceptions.

Pure module: no I/O. A worker gives each attempt's context an engine
(``pgtasks._execution.steps.DurableRun``) that reads and writes the checkpoints, fenced
by the attempt's lease; a context without one (a direct call, eager mode) runs each step
in place. See docs/howto/durable.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import inspect
import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Protocol

from ._errors import PgTasksError
from ._retry import MAX_RETRY_DELAY, Discard

#: Step names starting with this are pgtasks' own (sleeps, waits, versions).
RESERVED_STEP_PREFIX = "pgtasks."
#: The longest step name (characters).
MAX_STEP_NAME = 200


class Snooze(Exception):
    """Raise in a task to run it again after ``delay`` (seconds or a timedelta) without
    using up an attempt (Oban's and River's snooze): its slot is freed at once."""

    def __init__(self, delay: float | timedelta = 0.0) -> None:
        self.seconds = check_delay("Snooze", delay)
        super().__init__(f"snoozed for {self.seconds:g} s")


class EventTimeout(PgTasksError, TimeoutError):
    """``wait_for_event`` reached its timeout before an event of its key was emitted."""


class StepError(Discard, PgTasksError):
    """A durable step cannot go on: the job fails at once (no retry re-runs a recorded
    failure). ``step`` names it."""

    def __init__(self, message: str | None = None, step: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())
        self.step = step


class StepNameError(StepError, ValueError):
    """A step's name is not a usable name (empty, too long, NUL, a reserved prefix)."""


class StepFailed(StepError):
    """A step's final error, recorded in its checkpoint: raised again, without running the
    step, whenever the job's code reaches it."""


class StepMismatchError(StepError):
    """The task's code reached steps in another order, or under other names, than its
    checkpoints record (the code changed under a sleeping or retried job)."""


class Parked(BaseException):
    """Raised inside a task by a durable sleep or wait once its job is parked: the attempt
    ends here (a BaseException: ``except Exception`` in the task does not stop it). The
    worker writes nothing more for it: the job is pending again, its attempt given back."""

    def __init__(self, seconds: float, kind: str) -> None:
        super().__init__(f"parked ({kind}) for {seconds:g} s")
        self.seconds = seconds
        self.kind = kind


def check_delay(what: str, delay: float | timedelta) -> float:
    """``delay`` in seconds, finite, in [0, 1e9] (a clear error otherwise)."""
    if isinstance(delay, bool) or not isinstance(delay, (int, float, timedelta)):
        raise TypeError(f"{what}: the delay must be seconds or a timedelta, got {delay!r}")
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    if not math.isfinite(seconds) or seconds < 0 or seconds > MAX_RETRY_DELAY:
        raise ValueError(f"{what}: the delay must be within [0, 1e9] seconds, got {delay!r}")
    return seconds


def check_step_name(name: object, *, internal: bool = False) -> str:
    """A step's name: a non-empty string without NUL, at most MAX_STEP_NAME characters,
    not starting with RESERVED_STEP_PREFIX (pgtasks' own steps only)."""
    if not isinstance(name, str) or not name:
        raise StepNameError(f"a step's name must be a non-empty string, got {name!r:.80}")
    if len(name) > MAX_STEP_NAME or "\x00" in name:
        raise StepNameError(
            f"a step's name must be at most {MAX_STEP_NAME} characters without NUL,"
            f" got {name[:60]!r}…"
        )
    if not internal and name.startswith(RESERVED_STEP_PREFIX):
        raise StepNameError(
            f"step name {name!r} starts with {RESERVED_STEP_PREFIX!r}, a prefix reserved"
            " for pgtasks' own steps; choose another name"
        )
    return name


@dataclasses.dataclass(frozen=True)
class StepCall:
    """One call of a step: ``function(*args, **kwargs)`` as step ``name``."""

    name: str
    function: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    retries: int = 0
    #: The function takes the step's connection as its first argument.
    connection: bool = False


class DurableEngine(Protocol):
    """What the context delegates to in a worker (one per attempt)."""

    @property
    def step_token(self) -> str | None: ...
    def step(self, call: StepCall) -> Any: ...
    async def astep(self, call: StepCall) -> Any: ...
    def transaction(self) -> contextlib.AbstractContextManager[Any]: ...
    def atransaction(self) -> contextlib.AbstractAsyncContextManager[Any]: ...
    def sleep(self, seconds: float) -> None: ...
    def wait_for_event(self, key: str, timeout: float | None) -> Any: ...
    def version(self, name: str) -> bool: ...


def _check_retries(retries: object) -> int:
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 100:
        raise ValueError(f"retries= must be an integer in [0, 100], got {retries!r}")
    return retries


class DurableContext:
    """The durable part of JobContext (see docs/howto/durable.md)."""

    _durable: DurableEngine | None

    @property
    def step_token(self) -> str | None:
        """While a step runs: its idempotency token ``pgtasks:<job id>:<name>:<n>``, the
        same on every attempt of the job (pass it to external APIs). None otherwise."""
        return self._durable.step_token if self._durable is not None else None

    def _engine(self, name: str, retries: object, connection: bool) -> DurableEngine | None:
        """Check a step's arguments; the engine (None: the step runs in place)."""
        check_step_name(name)
        _check_retries(retries)
        if self._durable is None and connection:
            raise RuntimeError(f"step {name!r}: connection=True needs a job run by a worker")
        return self._durable

    def step(
        self,
        name: str,
        function: Callable[..., Any],
        /,
        *args: Any,
        retries: int = 0,
        connection: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Run ``function(*args, **kwargs)`` once per job; its JSON result is checkpointed
        (fenced by this attempt's lease) and returned again, without running it, when the
        job's code reaches this step on a later attempt. ``retries``: tries again this many
        times on an exception, backing off as the task's retry policy does.
        ``connection=True``: ``function`` gets a connection as its first argument whose
        transaction commits the checkpoint with its writes (exactly once); the same as
        ``with ctx.transaction() as conn`` inside ``function``."""
        engine = self._engine(name, retries, connection)
        if engine is None:
            return function(*args, **kwargs)
        return engine.step(StepCall(name, function, args, kwargs, retries, connection))

    async def astep(
        self,
        name: str,
        function: Callable[..., Any],
        /,
        *args: Any,
        retries: int = 0,
        connection: bool = False,
        **kwargs: Any,
    ) -> Any:
        """:meth:`step` for ``async def`` tasks: ``function`` may be a coroutine function
        (with ``connection=True`` it then gets an ``AsyncConnection``)."""
        engine = self._engine(name, retries, connection)
        if engine is None:
            value = function(*args, **kwargs)
            return await value if inspect.isawaitable(value) else value
        return await engine.astep(StepCall(name, function, args, kwargs, retries, connection))

    def transaction(self) -> contextlib.AbstractContextManager[Any]:
        """Inside a step's function: ``with ctx.transaction() as conn`` gives the step's
        connection, in a transaction that holds the job under this attempt's lease; the
        step's checkpoint is written in it and it commits when the step returns (its
        writes and its checkpoint: exactly once), or rolls back when it raises. Each
        block is a savepoint. Outside a step: StepError; outside a worker: RuntimeError."""
        if self._durable is None:
            raise RuntimeError("ctx.transaction() needs a job run by a worker")
        return self._durable.transaction()

    def atransaction(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """:meth:`transaction` for the coroutine function of an ``astep``: ``async with
        ctx.atransaction() as conn`` (an ``AsyncConnection``)."""
        if self._durable is None:
            raise RuntimeError("ctx.atransaction() needs a job run by a worker")
        return self._durable.atransaction()

    def sleep(self, duration: float | timedelta) -> None:
        """Sleep durably: the job is parked until the wake time (no slot, no lease, no
        attempt used) and runs again from the top, its steps replayed; this call then
        returns at once. Outside a worker (a direct call, eager mode in tests) it returns
        at once: there is no job to park."""
        seconds = check_delay("sleep", duration)
        if self._durable is None:
            return
        self._durable.sleep(seconds)

    async def asleep(self, duration: float | timedelta) -> None:
        """:meth:`sleep` for ``async def`` tasks."""
        seconds = check_delay("sleep", duration)
        if self._durable is None:
            return
        await asyncio.to_thread(self._durable.sleep, seconds)

    def wait_for_event(self, key: str, *, timeout: float | timedelta | None = None) -> Any:
        """Park the job until an event of ``key`` is emitted (``app.emit_event``), then
        return its payload; an event emitted before the wait counts. Raises EventTimeout
        after ``timeout`` (None: wait for ever)."""
        if not isinstance(key, str) or not key or "\x00" in key or len(key) > 1000:
            raise ValueError(f"an event key must be a non-empty string (<= 1000), got {key!r}")
        seconds = None if timeout is None else check_delay("wait_for_event", timeout)
        if self._durable is None:
            raise RuntimeError("wait_for_event needs a job run by a worker")
        return self._durable.wait_for_event(key, seconds)

    async def await_event(self, key: str, *, timeout: float | timedelta | None = None) -> Any:
        """:meth:`wait_for_event` for ``async def`` tasks."""
        return await asyncio.to_thread(self.wait_for_event, key, timeout=timeout)

    def version(self, name: str) -> bool:
        """Whether this job takes the code path marked ``name`` (DBOS's ``patch``): True
        for a job that had not reached this point when the marker was added (and for
        every new job), False for one whose checkpoints show it passed here under the old
        code. Recorded as a marker step."""
        check_step_name(name)
        if self._durable is None:
            return True
        return self._durable.version(name)


class CurrentContext:
    """The context of the attempt running in this thread or asyncio task (what an
    ``@app.step`` function checkpoints into), made on first use for an unbound task."""

    __slots__ = ("_context", "_make")

    def __init__(self, make: Callable[[], DurableContext]) -> None:
        self._make = make
        self._context: DurableContext | None = None

    @classmethod
    def of(cls, context: DurableContext) -> CurrentContext:
        made = cls(lambda: context)
        made._context = context
        return made

    def get(self) -> DurableContext:
        if self._context is None:
            self._context = self._make()
        return self._context


#: Set by the worker at the start of each attempt, in the thread or task that runs it
#: (for an unbound task only once a step function exists: nothing else reads it).
CURRENT: contextvars.ContextVar[CurrentContext | None] = contextvars.ContextVar(
    "pgtasks_current_attempt", default=None
)
#: Whether this process made a step function (``@app.step``).
step_functions = [False]


def step_function(
    function: Callable[..., Any], *, name: str | None = None, retries: int = 0
) -> Callable[..., Any]:
    """``function`` as a durable step (``@app.step``): called inside a job run by a
    worker, it is ``ctx.step(name, function, *args, **kwargs)`` of that job (named by
    the function, occurrences counted); called anywhere else, it runs plainly."""
    if not callable(function):
        raise TypeError(f"@app.step decorates a function, got {function!r:.80}")
    step_name = check_step_name(name if name is not None else function.__name__)
    _check_retries(retries)
    step_functions[0] = True

    def engine() -> DurableEngine | None:
        current = CURRENT.get()
        return None if current is None else current.get()._durable

    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def arun(*args: Any, **kwargs: Any) -> Any:
            durable = engine()
            if durable is None:
                return await function(*args, **kwargs)
            return await durable.astep(StepCall(step_name, function, args, kwargs, retries))

        return arun

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        durable = engine()
        if durable is None:
            return function(*args, **kwargs)
        return durable.step(StepCall(step_name, function, args, kwargs, retries))

    return run
