"""Run claimed jobs: sync tasks on a thread pool, ``async def`` tasks on one event loop.

No SQL here: each attempt ends in an Outcome (see _retry) that the worker writes,
fenced by the attempt's lease. Slots are shared: a job holds its slot until its code
returns, even past its timeout (a thread cannot be killed; see docs on timeouts).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import itertools
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import _retry
from ._jobs import JobContext
from ._payload import encode_result
from ._retry import Outcome, RetryPolicy

if TYPE_CHECKING:
    from ._app import App
    from ._tasks import Task


@dataclasses.dataclass(frozen=True)
class ClaimedJob:
    """A job as claimed: its lease is (worker_id, attempt)."""

    id: int
    task_name: str
    queue: str
    priority: int
    args: list[Any]
    kwargs: dict[str, Any]
    attempt: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    claimed_at: datetime
    worker_id: int

    @classmethod
    def from_row(cls, row: Mapping[str, Any], worker_id: int) -> ClaimedJob:
        return cls(
            id=row["id"],
            task_name=row["task_name"],
            queue=row["queue"],
            priority=row["priority"],
            args=row["args"],
            kwargs=row["kwargs"],
            attempt=row["attempts"],
            max_attempts=row["max_attempts"],
            run_at=row["run_at"],
            created_at=row["created_at"],
            claimed_at=row["claimed_at"],
            worker_id=worker_id,
        )


@dataclasses.dataclass(eq=False)
class Running:
    """One attempt in flight. ``token`` tells apart two attempts of one job id."""

    token: int
    job: ClaimedJob
    task: Task[Any, Any] | None
    started: float
    deadline: float | None
    future: concurrent.futures.Future[Outcome] | None = None
    #: Set when the outcome was decided without the code (timeout); its late end is ignored.
    abandoned: bool = False


def policy_of(task: Task[Any, Any]) -> RetryPolicy:
    return RetryPolicy(task.retry_backoff, task.retry_backoff_max, task.retry_jitter)


def unknown_task_outcome(job: ClaimedJob, app: App) -> Outcome:
    known = ", ".join(sorted(app.tasks)) or "none"
    return Outcome(
        "failed",
        "failed",
        error=(
            f"UnknownTaskError: no task named {job.task_name!r} is registered in this worker"
            f" (known: {known}); deploy the code that defines it, or run workers with"
            " --ignore-unknown to leave such jobs pending"
        ),
    )


class Executor:
    """Runs jobs and reports each ending through ``on_finished(running, outcome)``."""

    def __init__(
        self,
        app: App,
        *,
        concurrency: int,
        on_finished: Callable[[Running, Outcome], None],
    ) -> None:
        self.app = app
        self.concurrency = concurrency
        self.on_finished = on_finished
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=concurrency, thread_name_prefix="pgtasks-job"
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._tokens = itertools.count(1)
        self._lock = threading.Lock()

    # -- submitting --
    def submit(self, job: ClaimedJob) -> Running:
        task = self.app.tasks.get(job.task_name)
        now = time.monotonic()
        deadline = now + task.timeout if task is not None and task.timeout else None
        running = Running(next(self._tokens), job, task, now, deadline)
        if task is None:
            future: concurrent.futures.Future[Outcome] = concurrent.futures.Future()
            future.set_result(unknown_task_outcome(job, self.app))
        elif task.is_async:
            future = asyncio.run_coroutine_threadsafe(
                self._run_async(job, task), self._event_loop()
            )
            running.deadline = None  # the coroutine enforces its own timeout by cancellation
        else:
            future = self._threads.submit(self._run_sync, job, task)
        running.future = future
        future.add_done_callback(lambda done: self._finished(running, done))
        return running

    def _finished(self, running: Running, future: concurrent.futures.Future[Outcome]) -> None:
        try:
            outcome = future.result()
        except BaseException as error:  # the wrappers catch everything; this is a last resort
            outcome = Outcome("failed", "failed", error=_retry.describe_error(error))
        self.on_finished(running, outcome)

    def expire(self, running: Running) -> Outcome:
        """Decide the outcome of a sync attempt past its deadline; its code keeps running."""
        task = running.task
        if task is None or task.timeout is None:
            raise ValueError(f"job {running.job.id} has no timeout to expire")
        running.abandoned = True
        return _retry.after_timeout(
            task.timeout,
            attempt=running.job.attempt,
            max_attempts=running.job.max_attempts,
            policy=policy_of(task),
        )

    # -- running --
    @staticmethod
    def _context(job: ClaimedJob) -> JobContext:
        return JobContext(
            job_id=job.id,
            task_name=job.task_name,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            worker_id=job.worker_id,
            queue=job.queue,
        )

    def _call_arguments(self, job: ClaimedJob, task: Task[Any, Any]) -> list[Any]:
        return [self._context(job), *job.args] if task.bind else list(job.args)

    @staticmethod
    def _after_return(task: Task[Any, Any], value: Any) -> Outcome:
        try:
            return _retry.done(encode_result(task.name, value))
        except Exception as error:
            return Outcome("failed", "failed", error=_retry.describe_error(error))

    @staticmethod
    def _after_error(job: ClaimedJob, task: Task[Any, Any], error: BaseException) -> Outcome:
        return _retry.after_error(
            error,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            policy=policy_of(task),
            dont_retry=task.dont_retry,
        )

    def _run_sync(self, job: ClaimedJob, task: Task[Any, Any]) -> Outcome:
        try:
            value = task.function(*self._call_arguments(job, task), **job.kwargs)
        except BaseException as error:  # SystemExit in a task must not end the worker thread
            return self._after_error(job, task, error)
        return self._after_return(task, value)

    async def _run_async(self, job: ClaimedJob, task: Task[Any, Any]) -> Outcome:
        started = time.monotonic()
        try:
            coroutine = task.function(*self._call_arguments(job, task), **job.kwargs)
            if task.timeout:
                value = await asyncio.wait_for(coroutine, task.timeout)
            else:
                value = await coroutine
        except asyncio.TimeoutError as error:
            if task.timeout and time.monotonic() - started >= task.timeout:
                return _retry.after_timeout(
                    task.timeout,
                    attempt=job.attempt,
                    max_attempts=job.max_attempts,
                    policy=policy_of(task),
                )
            return self._after_error(job, task, error)
        except BaseException as error:
            return self._after_error(job, task, error)
        return self._after_return(task, value)

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    try:
                        loop.run_forever()
                    finally:
                        loop.run_until_complete(loop.shutdown_asyncgens())
                        loop.close()

                thread = threading.Thread(target=run, name="pgtasks-async", daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._loop_thread = loop, thread
            return self._loop

    # -- stopping --
    def cancel_async(self) -> None:
        """Cancel every running coroutine (used when a shutdown deadline passes)."""
        loop = self._loop
        if loop is None:
            return

        def cancel_all() -> None:
            for task in asyncio.all_tasks(loop):
                task.cancel()

        loop.call_soon_threadsafe(cancel_all)

    def shutdown(self) -> None:
        """Stop accepting work; running threads are not waited for (the worker decides)."""
        self._threads.shutdown(wait=False, cancel_futures=True)
        loop, thread = self._loop, self._loop_thread
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5.0)
