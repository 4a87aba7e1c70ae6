"""DurableRun: the checkpoints of one attempt's durable steps, sleeps and waits.

The task's code re-runs from the top on every attempt; the n-th step it reaches is
matched with the n-th checkpoint (by name and occurrence of that name). A checkpoint is
written only by the attempt that holds the job's lease (the store's statements lock the
job's row under the finish's condition); a refused write ends the attempt
(LeaseLostError) and is counted by the fenced counter. The checkpoints are read on the
first durable call of an attempt, never for a task that makes none.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .. import _retry
from .._app import routing
from .._counters import STEPS_CHECKPOINTED, STEPS_REPLAYED
from .._durable import (
    EventTimeout,
    Parked,
    Snooze,
    StepError,
    StepFailed,
    StepMismatchError,
    check_step_name,
)
from .._errors import LeaseLostError
from .._jobs import JobContext
from .._payload import encode_result
from .._retry import Discard, Outcome
from .._text import storable, truncate
from .meta import meta_writer
from .outcomes import outcome_of_error, policy_of

if TYPE_CHECKING:
    from .._app.app import App
    from .._app.tasks import Task
    from .._jobs import Attempt

logger = logging.getLogger("pgtasks.worker")

SLEEP_STEP = "pgtasks.sleep"
EVENT_STEP = "pgtasks.event"
VERSION_PREFIX = "pgtasks.version:"
_KNOWN_STATUSES = ("done", "failed", "sleep", "timeout", "version")


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    position: int
    name: str
    occurrence: int
    status: str
    result: Any
    error: str | None


def _ordinal(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10)
    return f"{number}{suffix or 'th'}"


class DurableRun:
    """One attempt's durable calls (pgtasks._durable.DurableEngine). Made per attempt at
    no cost: nothing is read until the code reaches its first durable call."""

    def __init__(
        self,
        task: Task[Any, Any],
        attempt: Attempt,
        *,
        claimed_at: datetime | None = None,
        on_refused: Callable[[], None] | None = None,
        on_counted: Callable[[str, int], None] | None = None,
    ) -> None:
        self._task = task
        self._attempt = attempt
        self._claimed_at = claimed_at
        self._on_refused = on_refused
        self._on_counted = on_counted
        self._loaded: list[Checkpoint] | None = None
        self._position = 0
        self._occurrences: dict[str, int] = {}
        self._consumed: dict[str, int] = {}
        self._token: str | None = None
        self._parked = False

    # -- reading and writing --
    def _owner(self) -> App:
        return routing.for_id(self._task.app, self._attempt.job_id)

    def _lease(self) -> dict[str, int]:
        attempt = self._attempt
        return {
            "job_id": attempt.job_id,
            "worker_id": attempt.worker_id,
            "attempt": attempt.attempt,
        }

    def _count(self, name: str) -> None:
        if self._on_counted is not None:
            self._on_counted(name, 1)

    def _refused(self, what: str) -> LeaseLostError:
        if self._on_refused is not None:
            self._on_refused()
        attempt = self._attempt
        message = (
            f"job {attempt.job_id}: attempt {attempt.attempt} on worker {attempt.worker_id} no"
            f" longer holds the job (rescued, cancelled or finished meanwhile): {what} was not"
            " recorded; this attempt stops"
        )
        logger.warning("%s", message, extra={"job_id": attempt.job_id})
        return LeaseLostError(message)

    def _load(self) -> list[Checkpoint]:
        if self._loaded is not None:
            return self._loaded
        owner = self._owner()
        job_id = self._attempt.job_id
        parked = "pgtasks.parked" in self._attempt.meta

        def load(conn: Any) -> list[dict[str, Any]]:
            if parked:  # running again: no longer parked
                owner.queries.unpark_job(conn, **self._lease())
            return owner.queries.load_job_steps(conn, job_id)

        rows = owner.database.run(load)
        self._loaded = [
            Checkpoint(
                row["position"],
                row["name"],
                row["occurrence"],
                row["status"],
                row["result"],
                row["error"],
            )
            for row in rows
        ]
        for checkpoint in self._loaded:
            if checkpoint.name == EVENT_STEP and isinstance(checkpoint.result, dict):
                key, event_id = checkpoint.result.get("key"), checkpoint.result.get("event_id")
                if isinstance(key, str) and isinstance(event_id, int):
                    self._consumed[key] = max(self._consumed.get(key, 0), event_id)
        return self._loaded

    def _next(self, name: str) -> tuple[int, int, Checkpoint | None]:
        """The occurrence and position of the step reached now, and its checkpoint."""
        if self._parked:
            raise StepError("this attempt parked its job: it runs no more steps", name)
        if self._token is not None:
            raise StepError(f"step {name!r} was called inside another step: steps do not nest")
        loaded = self._load()
        occurrence = self._occurrences.get(name, 0) + 1
        position = self._position
        checkpoint = loaded[position] if position < len(loaded) else None
        if checkpoint is not None and (checkpoint.name, checkpoint.occurrence) != (
            name,
            occurrence,
        ):
            raise StepMismatchError(
                f"job {self._attempt.job_id} reached step {name!r} ({_ordinal(occurrence)})"
                f" where its checkpoint {position + 1} records step {checkpoint.name!r}"
                f" ({_ordinal(checkpoint.occurrence)}): the task's code changed under the"
                " job; mark the change with ctx.version(...) or fork the job",
                name,
            )
        self._occurrences[name] = occurrence
        self._position = position + 1
        return occurrence, position, checkpoint

    def _record(
        self,
        name: str,
        occurrence: int,
        position: int,
        status: str,
        result_json: str | None,
        error: str | None,
        seconds: float,
        conn: Any = None,
    ) -> None:
        owner = self._owner()

        def write(connection: Any) -> dict[str, Any]:
            return owner.queries.record_job_step(
                connection,
                **self._lease(),
                name=name,
                occurrence=occurrence,
                position=position,
                status=status,
                result_json=result_json,
                error=error,
                seconds=seconds,
            )

        row = write(conn) if conn is not None else owner.database.run(write)
        if not row["held"]:
            raise self._refused(f"the checkpoint of step {name!r}")
        if row["written"]:
            self._count(STEPS_CHECKPOINTED)

    def _replay(self, checkpoint: Checkpoint) -> Any:
        self._count(STEPS_REPLAYED)
        if checkpoint.status == "done":
            return checkpoint.result
        if checkpoint.status == "failed":
            raise StepFailed(
                f"step {checkpoint.name!r} ({_ordinal(checkpoint.occurrence)}) failed on an"
                f" earlier attempt: {checkpoint.error or 'no error recorded'}",
                checkpoint.name,
            )
        raise StepError(
            f"the checkpoint of step {checkpoint.name!r} has status {checkpoint.status!r},"
            f" which pgtasks does not know (a row edited by hand?)",
            checkpoint.name,
        )

    def _encode(self, name: str, value: Any) -> str:
        try:
            return encode_result(self._task.name, value, max_bytes=self._task.app.max_result_bytes)
        except Exception as error:
            raise StepError(
                f"step {name!r} returned a value that cannot be checkpointed: {error}", name
            ) from error

    def _final(self, error: BaseException) -> bool:
        """Whether ``error`` is the step's final error: the job will not run it again."""
        task, attempt = self._task, self._attempt
        if isinstance(error, Discard) or (task.dont_retry and isinstance(error, task.dont_retry)):
            return True
        return attempt.attempt >= attempt.max_attempts

    # -- steps --
    @property
    def step_token(self) -> str | None:
        return self._token

    def _begin(self, name: str) -> tuple[int, int, Checkpoint | None]:
        check_step_name(name)
        return self._next(name)

    def _failed(
        self, name: str, occurrence: int, position: int, error: Exception, took: float
    ) -> None:
        """After the step's last try: record a final error (the job ends), then raise."""
        if isinstance(error, (StepError, LeaseLostError)) or not self._final(error):
            raise error
        text = truncate(storable(_retry.describe_error(error)), self._task.app.max_error_bytes)
        self._record(name, occurrence, position, "failed", None, text, took)
        raise StepFailed(f"step {name!r} failed: {type(error).__name__}: {error}", name) from error

    def _retry_wait(self, tries: int) -> float:
        return _retry.backoff(tries, policy_of(self._task))

    def step(
        self,
        name: str,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        retries: int,
        connection: bool,
    ) -> Any:
        occurrence, position, checkpoint = self._begin(name)
        if checkpoint is not None:
            return self._replay(checkpoint)
        started = time.monotonic()
        tries = 0
        self._token = f"pgtasks:{self._attempt.job_id}:{name}:{occurrence}"
        try:
            while True:
                try:
                    if connection:
                        return self._in_transaction(
                            name, occurrence, position, function, args, kwargs, started
                        )
                    value = function(*args, **kwargs)
                    break
                except Exception as error:
                    if tries < retries and not isinstance(error, (Discard, LeaseLostError)):
                        tries += 1
                        time.sleep(self._retry_wait(tries))
                        continue
                    self._token = None
                    self._failed(name, occurrence, position, error, time.monotonic() - started)
        finally:
            self._token = None
        result_json = self._encode(name, value)
        self._record(
            name, occurrence, position, "done", result_json, None, time.monotonic() - started
        )
        return json.loads(result_json)

    def _in_transaction(
        self,
        name: str,
        occurrence: int,
        position: int,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        started: float,
    ) -> Any:
        """The step's function and its checkpoint in one transaction: exactly once."""
        owner = self._owner()

        def run(conn: Any) -> Any:
            with conn.transaction():
                if owner.queries.hold_job(conn, **self._lease()) is None:
                    raise self._refused(f"step {name!r}")
                value = function(conn, *args, **kwargs)
                result_json = self._encode(name, value)
                self._record(
                    name,
                    occurrence,
                    position,
                    "done",
                    result_json,
                    None,
                    time.monotonic() - started,
                    conn,
                )
            return json.loads(result_json)

        return owner.database.run(run)

    async def astep(
        self,
        name: str,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        retries: int,
        connection: bool,
    ) -> Any:
        if connection or not inspect.iscoroutinefunction(function):
            return await asyncio.to_thread(
                self.step, name, function, args, kwargs, retries=retries, connection=connection
            )
        occurrence, position, checkpoint = await asyncio.to_thread(self._begin, name)
        if checkpoint is not None:
            return self._replay(checkpoint)
        started = time.monotonic()
        tries = 0
        self._token = f"pgtasks:{self._attempt.job_id}:{name}:{occurrence}"
        try:
            while True:
                try:
                    value = await function(*args, **kwargs)
                    break
                except Exception as error:
                    if tries < retries and not isinstance(error, (Discard, LeaseLostError)):
                        tries += 1
                        await asyncio.sleep(self._retry_wait(tries))
                        continue
                    self._token = None
                    took = time.monotonic() - started
                    await asyncio.to_thread(self._failed, name, occurrence, position, error, took)
        finally:
            self._token = None
        result_json = self._encode(name, value)
        took = time.monotonic() - started
        await asyncio.to_thread(
            self._record, name, occurrence, position, "done", result_json, None, took
        )
        return json.loads(result_json)

    # -- parking: sleeps, waits, snoozes --
    def _park(self, row: dict[str, Any], kind: str) -> Parked:
        if not row["held"]:
            raise self._refused(f"the {kind}")
        if not row["parked"]:
            raise StepError(f"the job's cancellation was requested: its {kind} ends the attempt")
        self._parked = True
        return Parked(float(row["seconds"]), kind)

    def park(
        self,
        *,
        kind: str,
        delay: float | None = None,
        until: Any = None,
        step: tuple[str, int, int] | None = None,
        extra: dict[str, Any] | None = None,
        conn: Any = None,
    ) -> Parked:
        """Park the job (fenced): the Parked exception to raise."""
        owner = self._owner()
        marker = json.dumps({"kind": kind, **(extra or {})})

        def write(connection: Any) -> dict[str, Any]:
            return owner.queries.park_job(
                connection,
                **self._lease(),
                marker_json=marker,
                delay=delay,
                until=until,
                step=step,
            )

        row = write(conn) if conn is not None else owner.database.run(write)
        if row["written"]:
            self._count(STEPS_CHECKPOINTED)
        return self._park(row, kind)

    def sleep(self, seconds: float) -> None:
        occurrence, position, checkpoint = self._next(SLEEP_STEP)
        if checkpoint is None:
            raise self.park(kind="sleep", delay=seconds, step=(SLEEP_STEP, occurrence, position))
        self._count(STEPS_REPLAYED)
        until = checkpoint.result.get("until") if isinstance(checkpoint.result, dict) else None
        if checkpoint.status != "sleep" or not isinstance(until, str):
            raise StepError(f"the checkpoint of sleep {position + 1} is not a sleep's", SLEEP_STEP)
        try:
            wake = datetime.fromisoformat(until)
        except ValueError:
            return  # 'infinity' or unreadable: the sleep is over once the job runs again
        if self._claimed_at is not None and self._claimed_at < wake:
            raise self.park(kind="sleep", until=wake)  # run early (by hand): sleep on

    def wait_for_event(self, key: str, timeout: float | None) -> Any:
        occurrence, position, checkpoint = self._next(EVENT_STEP)
        if checkpoint is not None:
            self._count(STEPS_REPLAYED)
            result = checkpoint.result if isinstance(checkpoint.result, dict) else {}
            if result.get("key") != key:
                raise StepMismatchError(
                    f"job {self._attempt.job_id} waits for event {key!r} where its checkpoint"
                    f" {position + 1} records a wait for {result.get('key')!r}",
                    EVENT_STEP,
                )
            if checkpoint.status == "timeout":
                raise EventTimeout(f"no event {key!r} came before the wait's timeout")
            return result.get("payload")
        owner, store = self._owner(), self._owner().queries
        after_id = self._consumed.get(key, 0)

        def wait(conn: Any) -> tuple[str, Any]:
            with conn.transaction():
                store.lock_event_key(conn, key)
                if store.hold_job(conn, **self._lease()) is None:
                    return ("refused", None)
                event = store.find_event(conn, key=key, after_id=after_id)
                if event is not None:
                    result = {"key": key, "event_id": event["id"], "payload": event["payload"]}
                    self._record(
                        EVENT_STEP,
                        occurrence,
                        position,
                        "done",
                        json.dumps(result),
                        None,
                        0.0,
                        conn,
                    )
                    store.end_wait(conn, self._attempt.job_id)
                    return ("event", event)
                started = store.start_wait(
                    conn, job_id=self._attempt.job_id, key=key, after_id=after_id, timeout=timeout
                )
                if started["passed"]:
                    result_json = json.dumps({"key": key})
                    self._record(
                        EVENT_STEP, occurrence, position, "timeout", result_json, None, 0.0, conn
                    )
                    store.end_wait(conn, self._attempt.job_id)
                    return ("timeout", None)
                until = "infinity" if timeout is None else started["deadline"]
                return (
                    "parked",
                    self.park(kind="event", until=until, extra={"key": key}, conn=conn),
                )

        what, value = owner.database.run(wait)
        if what == "refused":
            raise self._refused(f"the wait for event {key!r}")
        if what == "event":
            self._consumed[key] = value["id"]
            return value["payload"]
        if what == "timeout":
            raise EventTimeout(f"no event {key!r} came within the wait's timeout of {timeout:g} s")
        raise value

    def version(self, name: str) -> bool:
        marker = VERSION_PREFIX + name
        loaded = self._load()
        position = self._position
        checkpoint = loaded[position] if position < len(loaded) else None
        if checkpoint is not None and checkpoint.name != marker:
            return False  # the job passed here under the code without the marker
        occurrence, position, checkpoint = self._next(marker)
        if checkpoint is None:
            self._record(marker, occurrence, position, "version", None, None, 0.0)
        else:
            self._count(STEPS_REPLAYED)
        return True


def attempt_context(
    task: Task[Any, Any],
    attempt: Attempt,
    cancelled: Callable[[], bool],
    claimed_at: datetime | None = None,
    on_refused: Callable[[], None] | None = None,
    on_counted: Callable[[str, int], None] | None = None,
) -> JobContext:
    """The context of a bound task's attempt: its meta writes and durable calls fenced by
    its lease (``on_refused`` told of each refused write)."""
    return JobContext.of_attempt(
        attempt,
        cancelled=cancelled,
        write_meta=meta_writer(
            task.app, attempt.job_id, attempt.worker_id, attempt.attempt, on_refused
        ),
        durable=DurableRun(
            task, attempt, claimed_at=claimed_at, on_refused=on_refused, on_counted=on_counted
        ),
    )


def ending_of_error(
    task: Task[Any, Any],
    attempt: Attempt,
    error: BaseException,
    on_refused: Callable[[], None] | None = None,
) -> Outcome:
    """The outcome of an attempt whose code raised ``error``: a parked job's (written
    already), a snooze's (parked here, fenced), or what the retry policy says."""
    if isinstance(error, Parked):
        return Outcome.parked(error.seconds, error.kind)
    if isinstance(error, Snooze):
        run = DurableRun(task, attempt, on_refused=on_refused)
        try:
            raise run.park(kind="snooze", delay=error.seconds)
        except Parked as parked:
            return Outcome.parked(parked.seconds, "snooze")
        except LeaseLostError as lost:
            return Outcome.retry(error.seconds, str(lost), "pgtasks.LeaseLostError")
        except Exception as failure:
            return outcome_of_error(task, attempt.attempt, attempt.max_attempts, failure)
    return outcome_of_error(task, attempt.attempt, attempt.max_attempts, error)
