"""Retry decisions: backoff delays and what an attempt's ending means for its job.

Pure module: no I/O. The backoff is tenacity's exponential wait strategy (base * 2**(n-1),
capped), scaled by "equal jitter": a uniform factor in [0.5, 1.0], so retries of many
jobs that failed together spread out while each delay stays at least half the nominal.
"""

from __future__ import annotations

import dataclasses
import math
import random
import traceback
from datetime import timedelta
from typing import Literal

from ._errors import PayloadNotSerializableError

#: Longest explicit retry delay: about 31 years.
MAX_RETRY_DELAY = 1e9

#: Waits between tries after consecutive database failures (every loop that reconnects:
#: the claim loop, the worker's services, beat, the result listener, shutdown writes).
RECONNECT_FIRST_DELAY = 0.1
RECONNECT_MAX_DELAY = 2.0


def reconnect_delay(failures: int, *, cap: float = RECONNECT_MAX_DELAY) -> float:
    """Seconds to wait after the ``failures``-th consecutive failure (1, 2, …): 0.1 s,
    doubling, at most ``cap``. Any count is fine (the exponent is bounded, so an outage
    of days cannot overflow it)."""
    return min(cap, RECONNECT_FIRST_DELAY * 2.0 ** min(max(failures - 1, 0), 32))


class Retry(Exception):
    """Raise in a task to run it again after ``delay`` (seconds or a timedelta).

    The attempt counts towards ``max_attempts``; when none are left the job fails.
    ``max_attempts``: this retry's own limit instead of the job's (a larger one runs the
    job past its ``max_attempts``: each claim then gives it one more attempt).
    """

    def __init__(
        self,
        delay: float | timedelta = 0.0,
        reason: str | None = None,
        *,
        max_attempts: int | None = None,
    ) -> None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
        if not math.isfinite(seconds) or seconds < 0 or seconds > MAX_RETRY_DELAY:
            raise ValueError(
                f"Retry delay must be a finite number of seconds in [0, 1e9], got {delay!r}"
            )
        if max_attempts is not None and (
            isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
        ):
            raise ValueError(f"Retry max_attempts must be a positive int, got {max_attempts!r}")
        self.delay = seconds
        self.reason = reason
        self.max_attempts = max_attempts
        super().__init__(reason or f"retry requested in {seconds:g} s")


class Discard(Exception):
    """Raise in a task to fail its job at once, without further attempts."""


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    base: float = 1.0
    cap: float = 600.0
    jitter: bool = True
    #: An attempt past its timeout is retried (False: the job fails at once).
    retry_timeouts: bool = True


def backoff(attempt: int, policy: RetryPolicy, rng: random.Random | None = None) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
    import tenacity  # on first use: a process that never retries does not import it

    state = tenacity.RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
    state.attempt_number = max(1, attempt)
    nominal = float(tenacity.wait_exponential(multiplier=policy.base, max=policy.cap)(state))
    if not policy.jitter:
        return nominal
    return nominal * (rng or random).uniform(0.5, 1.0)


OutcomeKind = Literal["done", "retry", "failed", "discarded", "timeout", "cancelled", "parked"]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How an attempt ended, ready to be written (fenced) by the worker.

    ``status`` is the job's next status: done, pending (a retry after ``delay`` s) or failed.
    Build one with the constructor of its kind: :meth:`done`, :meth:`retry`,
    :meth:`failed`, :meth:`discarded`, :meth:`timed_out` or :meth:`cancelled`.
    """

    kind: OutcomeKind
    status: Literal["done", "pending", "failed"]
    result_json: str | None = None
    error: str | None = None
    delay: float = 0.0
    #: The qualified class path of the exception that ended the attempt, when known.
    exception_type: str | None = None
    #: Counters (pgtasks._counters) the attempt counted where the worker could not see
    #: them: a process-pool child's durable steps, as (name, amount) pairs.
    counted: tuple[tuple[str, int], ...] = ()
    #: The attempt's captured log lines (pgtasks._execution.joblogs), JSON; None: none.
    logs_json: str | None = None

    @classmethod
    def done(cls, result_json: str) -> Outcome:
        """The task returned: ``result_json`` is its result, encoded."""
        return cls("done", "done", result_json=result_json)

    @classmethod
    def retry(cls, delay: float, error: str, exception_type: str | None = None) -> Outcome:
        """Run the job again after ``delay`` seconds; ``error`` says why."""
        return cls("retry", "pending", error=error, delay=delay, exception_type=exception_type)

    @classmethod
    def failed(cls, error: str, exception_type: str | None = None) -> Outcome:
        """The job fails (no attempt left, or nothing to retry)."""
        return cls("failed", "failed", error=error, exception_type=exception_type)

    @classmethod
    def discarded(cls, error: str, exception_type: str | None = None) -> Outcome:
        """The task asked to fail at once (Discard, or an exception in ``dont_retry``)."""
        return cls("discarded", "failed", error=error, exception_type=exception_type)

    @classmethod
    def timed_out(cls, error: str, *, delay: float | None) -> Outcome:
        """The attempt passed its timeout: retried after ``delay`` seconds (None: failed)."""
        kind = "builtins.TimeoutError"
        if delay is None:
            return cls("timeout", "failed", error=error, exception_type=kind)
        return cls("timeout", "pending", error=error, delay=delay, exception_type=kind)

    @classmethod
    def cancelled(cls, reason: str | None) -> Outcome:
        """The job was cancelled (before it started, or while it ran)."""
        return cls("cancelled", "failed", error=reason)

    @classmethod
    def parked(cls, delay: float, reason: str) -> Outcome:
        """The attempt parked its job itself (a durable sleep, a wait, a snooze: written
        already, fenced): pending again in ``delay`` s, its attempt given back. The worker
        writes nothing more for it."""
        return cls("parked", "pending", delay=delay, error=None, exception_type=reason)

    @property
    def summary(self) -> str:
        if self.kind == "parked":
            return f"parked ({self.exception_type}) for {self.delay:.3g} s"
        if self.kind == "retry":
            return f"retry in {self.delay:.3g} s"
        return self.kind


def describe_error(error: BaseException) -> str:
    """``Type: message`` plus the traceback, as stored in ``last_error``."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    # PostgreSQL text cannot hold NUL characters: show them escaped.
    return text.strip().replace("\x00", "\\x00")


def exception_path(error: BaseException) -> str:
    """The qualified class path of an exception, e.g. ``builtins.ValueError``."""
    kind = type(error)
    return f"{kind.__module__}.{kind.__qualname__}"


def after_error(
    error: BaseException,
    *,
    attempt: int,
    max_attempts: int,
    policy: RetryPolicy,
    dont_retry: tuple[type[BaseException], ...] = (),
) -> Outcome:
    """The outcome of an attempt that raised ``error``."""
    text = describe_error(error)
    kind = exception_path(error)
    if isinstance(error, Retry):
        if attempt >= (error.max_attempts if error.max_attempts is not None else max_attempts):
            return Outcome.failed(text, kind)
        return Outcome.retry(error.delay, text, kind)
    if isinstance(error, Discard) or (dont_retry and isinstance(error, dont_retry)):
        return Outcome.discarded(text, kind)
    if isinstance(error, PayloadNotSerializableError) or attempt >= max_attempts:
        return Outcome.failed(text, kind)
    return Outcome.retry(backoff(attempt, policy), text, kind)


#: How the error of an attempt past its timeout begins (then the timeout, " s").
TIMED_OUT = "TimeoutError: the task did not finish within its timeout of "


def after_timeout(
    timeout: float, *, attempt: int, max_attempts: int, policy: RetryPolicy
) -> Outcome:
    """The outcome of an attempt that passed its ``timeout``: retried while attempts are
    left, unless the policy says timeouts are not retried."""
    message = f"{TIMED_OUT}{timeout:g} s"
    last = attempt >= max_attempts or not policy.retry_timeouts
    delay = None if last else backoff(attempt, policy)
    return Outcome.timed_out(message, delay=delay)
