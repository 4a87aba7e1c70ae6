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
from .._counters import STEPS_CHECKPOINTED, STEPS_REPLAYED
from .._durable import (
    CURRENT,
    CurrentContext,
    EventTimeout,
    Parked,
    Snooze,
    StepCall,
    StepError,
    StepFailed,
    StepMismatchError,
    check_step_name,
    step_functions,
)
from .._errors import LeaseLostError
from .._jobs import JobContext
from .._payload import encode_result
from .._retry import Discard, Outcome
from .._store.durable import StepRecord
from .._text import storable, truncate
from .meta import meta_writer
from .outcomes import outcome_of_error, policy_of
from .step_transactions import StepTransactions

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


@dataclasses.dataclass
class _Step:
    """A step reached by the code: its checkpoint, or how its run goes."""

    name: str
    occurrence: int
    position: int
    checkpoint: Checkpoint | None
    started: float
    tries: int = 0

    def token(self, job_id: int) -> str:
        return f"pgtasks:{job_id}:{self.name}:{self.occurrence}"


def _ordinal(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10)
    return f"{number}{suffix or 'th'}"


class DurableRun(StepTransactions):
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
        on_parked: Callable[[], None] | None = None,
    ) -> None:
        self._task = task
        self._on_parked = on_parked
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
        return self._task.app.routing.for_id(self._attempt.job_id)

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
                self._steps().unpark_job(conn, **self._lease())
            return self._steps().load_job_steps(conn, job_id)

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

    def _checkpoint(
        self,
        name: str,
        occurrence: int,
        position: int,
        status: str,
        result_json: str | None,
        error: str | None,
        seconds: float,
    ) -> StepRecord:
        attempt = self._attempt
        return StepRecord(
            attempt.job_id,
            attempt.worker_id,
            attempt.attempt,
            name,
            occurrence,
            position,
            status,
            result_json,
            error,
            seconds,
        )

    def _recorded(self, step: StepRecord, row: dict[str, Any]) -> None:
        if not row["held"]:
            raise self._refused(f"the checkpoint of step {step.name!r}")
        if row["written"]:
            self._count(STEPS_CHECKPOINTED)

    def _record(self, *fields: Any, conn: Any = None) -> None:
        """Write a checkpoint (in ``conn``'s transaction, the step's, or one of its own)."""
        step = self._checkpoint(*fields)
        if conn is not None:
            self._recorded(step, self._steps().record_job_step(conn, step))
        else:
            self._recorded(step, self._write_checkpoint(step))

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

    # -- steps: one body for step() and astep(), its waits and writes done by each --
    @property
    def step_token(self) -> str | None:
        return self._token

    def _begin(self, name: str) -> _Step:
        """The step reached now: its checkpoint to replay, or a step to run."""
        check_step_name(name)
        occurrence, position, checkpoint = self._next(name)
        return _Step(name, occurrence, position, checkpoint, time.monotonic())

    def _ran(self, step: _Step, value: Any) -> tuple[StepRecord, Any]:
        """The checkpoint of a step that returned ``value``, and the value as replayed."""
        result_json = self._encode(step.name, value)
        took = time.monotonic() - step.started
        record = self._checkpoint(
            step.name, step.occurrence, step.position, "done", result_json, None, took
        )
        return record, json.loads(result_json)

    def _retry_after(self, step: _Step, error: Exception, retries: int) -> float:
        """The wait before the step's next try; else its error is recorded if final
        (the job ends) and raised."""
        if step.tries < retries and not isinstance(error, (Discard, LeaseLostError, StepError)):
            step.tries += 1
            return _retry.backoff(step.tries, policy_of(self._task))
        self._token = None
        if isinstance(error, (StepError, LeaseLostError)) or not self._final(error):
            raise error
        text = truncate(storable(_retry.describe_error(error)), self._task.app.max_error_bytes)
        took = time.monotonic() - step.started
        self._record(step.name, step.occurrence, step.position, "failed", None, text, took)
        raise StepFailed(
            f"step {step.name!r} failed: {type(error).__name__}: {error}", step.name
        ) from error

    def step(self, request: StepCall) -> Any:
        name, function, args, kwargs = request.name, request.function, request.args, request.kwargs
        step = self._begin(name)
        if step.checkpoint is not None:
            return self._replay(step.checkpoint)
        call = self._with_connection(function) if request.connection else function
        self._token = step.token(self._attempt.job_id)
        try:
            while True:
                try:
                    record, value = self._ran(step, call(*args, **kwargs))
                    self._recorded(record, self._write_checkpoint(record))
                    self._end_transaction(None)
                    return value
                except Exception as error:
                    self._end_transaction(error)
                    time.sleep(self._retry_after(step, error, request.retries))
        finally:
            self._token = None
            if self._tx is not None:
                self._end_transaction(StepError(f"step {name!r} did not end"))

    async def astep(self, request: StepCall) -> Any:
        name, function, args, kwargs = request.name, request.function, request.args, request.kwargs
        if not inspect.iscoroutinefunction(function):  # a sync function: on a thread
            return await asyncio.to_thread(self.step, request)
        step = await asyncio.to_thread(self._begin, name)
        if step.checkpoint is not None:
            return self._replay(step.checkpoint)
        call = self._with_aconnection(function) if request.connection else function
        self._token = step.token(self._attempt.job_id)
        try:
            while True:
                try:
                    record, value = self._ran(step, await call(*args, **kwargs))
                    row = await self._awrite_checkpoint(record)
                    if row is None:  # no async transaction: a write of its own, on a thread
                        row = await asyncio.to_thread(self._write_checkpoint, record)
                    self._recorded(record, row)
                    await self._aend_transaction(None)
                    return value
                except Exception as error:
                    await self._aend_transaction(error)
                    wait = await asyncio.to_thread(self._retry_after, step, error, request.retries)
                    await asyncio.sleep(wait)
        finally:
            self._token = None
            if self._tx is not None or self._atx is not None:
                await self._aend_transaction(StepError(f"step {name!r} did not end"))

    # -- parking: sleeps, waits, snoozes --
    @property
    def parked(self) -> bool:
        """This attempt parked its job."""
        return self._parked

    def _park(self, row: dict[str, Any], kind: str) -> Parked:
        if not row["held"]:
            raise self._refused(f"the {kind}")
        if not row["parked"]:
            raise StepError(f"the job's cancellation was requested: its {kind} ends the attempt")
        self._parked = True
        if self._on_parked is not None:
            self._on_parked()
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
            return self._steps().park_job(
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
        owner, store = self._owner(), self._steps()
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
                        conn=conn,
                    )
                    store.end_wait(conn, self._attempt.job_id)
                    return ("event", event)
                started = store.start_wait(
                    conn, job_id=self._attempt.job_id, key=key, after_id=after_id, timeout=timeout
                )
                if started["passed"]:
                    result_json = json.dumps({"key": key})
                    self._record(
                        EVENT_STEP,
                        occurrence,
                        position,
                        "timeout",
                        result_json,
                        None,
                        0.0,
                        conn=conn,
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
    on_parked: Callable[[], None] | None = None,
) -> JobContext:
    """The context of an attempt: its meta writes and durable calls fenced by its lease
    (``on_refused`` told of each refused write, ``on_parked`` of a park). Once the
    attempt parked its job, it writes no meta (the job may be claimed again meanwhile,
    by this worker under the same attempt number: see docs/howto/durable.md)."""
    run = DurableRun(
        task,
        attempt,
        claimed_at=claimed_at,
        on_refused=on_refused,
        on_counted=on_counted,
        on_parked=on_parked,
    )
    writer = meta_writer(task.app, attempt.job_id, attempt.worker_id, attempt.attempt, on_refused)

    def write_meta(patch: dict[str, Any]) -> None:
        if run.parked:
            raise StepError("this attempt parked its job: it writes nothing more")
        if writer is not None:
            writer(patch)

    return JobContext.of_attempt(attempt, cancelled=cancelled, write_meta=write_meta, durable=run)


def attempt_arguments(
    task: Task[Any, Any], args: list[Any], make: Callable[[], JobContext]
) -> list[Any]:
    """The positional arguments of an attempt's call (its context first for a bound
    task), its context made current (CURRENT, for ``@app.step`` functions; an unbound
    task's is made on its first use). Called in the thread or asyncio task that runs
    the attempt: each attempt sets it there, so it is never another's."""
    if task.bind:
        context = make()
        CURRENT.set(CurrentContext.of(context))
        return [context, *args]
    if step_functions[0]:  # no step function: nothing reads it
        CURRENT.set(CurrentContext(make))
    return list(args)


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


def settled(outcome: Outcome, counts: dict[str, int], parked: bool) -> Outcome:
    """A process-pool child's outcome with the counters it counted; a parked one's
    whatever its code did after the park (the worker writes nothing for it)."""
    if parked and outcome.kind != "parked":
        outcome = Outcome.parked(0.0, "parked, then went on")
    if counts:
        outcome = dataclasses.replace(outcome, counted=tuple(counts.items()))
    return outcome
