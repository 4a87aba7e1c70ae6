"""Run claimed jobs on the executor each task chooses: threads, processes or the event loop.

No SQL here: each attempt ends in an Outcome (see _retry) that the worker writes,
fenced by the attempt's lease, with its captured log lines (joblogs.py) when it logged.

Routing (:meth:`Executor.route`): a task's ``executor=`` option wins; an ``async def``
runs on the event loop; a sync task runs on its queue's executor (``queue_executors``)
or the worker's default ``pool`` ("thread" unless told otherwise).

Slots: sync threads and coroutines share ``concurrency`` slots; the process pool has
``processes`` slots. The worker claims up to the sum of the free slots of the executors
its tasks can use (:attr:`Executor.capacity`). A claim can bring more jobs for one
executor than it has free slots; the extras wait here, claimed and heartbeated, and start
(their timeouts with them) as soon as a slot frees up. A job holds its slot until its
code returns, even past its timeout: a thread cannot be killed, while a process child past
its hard limit (or terminated: :meth:`Executor.terminate`) is killed and replaced.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _retry
from .._dsn import dsn_secrets
from .._durable import Snooze
from .._instrumentation import start_attempt_trace
from .._jobs import ExecutorName, JobContext
from .._leases import ClaimedJob
from .._retry import Outcome
from .child import JobMessage
from .joblogs import JobLogs, attach
from .loop_thread import LoopThread
from .outcomes import (
    CANCELLED_BEFORE_START,
    expire_attempt,
    failed_to_start_outcome,
    malformed_arguments_outcome,
    outcome_of_ending,
    outcome_of_error,
    outcome_of_return,
    policy_of,
    unknown_task_outcome,
)
from .process_pool import Ending, PoolJob, ProcessPool, start_pool
from .running import Running, describe_async_jobs
from .settings import ExecutorSettings
from .steps import attempt_arguments, attempt_context, ending_of_error
from .threads import JobThreads
from .watchdogs import SoftLimit, ThreadSoftLimits

if TYPE_CHECKING:
    from .._app.app import App
    from .._app.tasks import Task

logger = logging.getLogger("pgtasks.worker")


class Executor:
    """Runs jobs and reports each ending through ``on_finished(running, outcome)``."""

    def __init__(
        self,
        app: App,
        settings: ExecutorSettings | None = None,
        *,
        on_finished: Callable[[Running, Outcome], None],
        on_refused: Callable[[Running], None] | None = None,
        on_counted: Callable[[str, int], None] | None = None,
    ) -> None:
        self.app = app
        self.settings = settings or ExecutorSettings()
        #: Told of a lease fence's refusal of a running attempt's write; of counted steps.
        self.on_refused, self.on_counted = on_refused, on_counted
        self.concurrency = self.settings.concurrency
        self.on_finished = on_finished
        self._threads = JobThreads(self.concurrency, name="pgtasks-job")
        self._loop = LoopThread(
            lag_threshold=self.settings.loop_lag_threshold, describe=self._on_loop
        )
        self._soft_limits = ThreadSoftLimits()
        self._tokens = itertools.count(1)
        self._lock = threading.Lock()
        #: Thread and async jobs started and not returned; those waiting for a slot.
        self._local_busy = 0
        self._local_waiting: collections.deque[Running] = collections.deque()
        self._pool: ProcessPool | None = None
        self._pool_jobs: dict[int, Running] = {}
        #: Async jobs to start on the loop at its next wake-up.
        self._async_starts: list[tuple[Running, Task[Any, Any]]] = []
        #: Async jobs that ended, to report at the loop's next pass (loop thread only).
        self._async_ended: list[tuple[Running, Outcome]] = []
        #: Async jobs started (holding their slot) that no runner has taken yet, the
        #: runners (one asyncio task per slot at most, made as needed), those waiting
        #: for a job (each on a future of its own), and whether more runners are to be
        #: woken at the loop's next pass. Loop thread only.
        self._async_ready: collections.deque[tuple[Running, Task[Any, Any]]] = collections.deque()
        self._runners: list[asyncio.Task[None]] = []
        self._idle_runners: list[asyncio.Future[None]] = []
        self._spreading = False
        #: Async jobs whose coroutine is on the loop (named by the lag monitor).
        self._async_jobs: set[Running] = set()
        self.uses_local = True
        self.uses_processes = False
        self._logs = JobLogs(level=self.settings.job_log_level) if self.settings.job_logs else None

    # -- routing and capacity --
    def route(self, task: Task[Any, Any], queue: str) -> ExecutorName:
        """The executor a job of ``task`` in ``queue`` runs on."""
        if task.executor is not None:
            return task.executor
        if task.is_async:
            return "async"
        return self.settings.queue_executors.get(queue, self.settings.pool)

    def _possible_executors(self) -> set[ExecutorName]:
        defaults: set[ExecutorName] = set(self.settings.sync_defaults)
        possible: set[ExecutorName] = set()
        for task in self.app.tasks.values():
            if task.executor is not None:
                possible.add(task.executor)
            elif task.is_async:
                possible.add("async")
            else:
                possible |= defaults
        return possible

    @property
    def capacity(self) -> int:
        """Jobs this worker may hold at once: the slots of the executors it can use."""
        local = self.concurrency if self.uses_local else 0
        return local + (self.settings.pool_size if self.uses_processes else 0)

    def describe(self) -> str:
        """For the start banner, e.g. ``threads+async=10 processes=4 (spawn)``."""
        parts = [f"threads+async={self.concurrency}"] if self.uses_local else []
        if self.uses_processes:
            parts.append(
                f"processes={self.settings.pool_size} ({self.settings.process_start_method})"
            )
        return " ".join(parts)

    def process_pids(self) -> list[int]:
        return self._pool.pids() if self._pool is not None else []

    # -- starting --
    def start(self) -> None:
        """Decide which executors the registered tasks need; start the job threads (when
        sync tasks may run on them) and the process pool."""
        possible = self._possible_executors()
        if self._logs is not None:
            self._logs.start(dsn_secrets(self.app.dsn))
        self.uses_processes = "process" in possible
        self.uses_local = bool(possible & {"thread", "async"}) or not self.uses_processes
        if "thread" in possible:
            self._threads.start_all()
        if self.uses_processes:
            self._start_pool()

    def _start_pool(self) -> None:
        by_default = "process" in self.settings.sync_defaults
        names = {
            task.name
            for task in self.app.tasks.values()
            if task.executor == "process"
            or (task.executor is None and not task.is_async and by_default)
        }
        self._pool = start_pool(self.app, self.settings, names, on_ended=self._pool_ended)

    # -- submitting --
    def submit(self, job: ClaimedJob) -> Running:
        """Start ``job`` (or queue it for a slot). A job that cannot start ends failed at
        once with the reason: no claimed job is left without an outcome."""
        task = self.app.tasks.get(job.task_name)
        if task is None:
            return self._end_at_once(job, None, unknown_task_outcome(job.task_name, self.app))
        shape = malformed_arguments_outcome(job.args, job.kwargs, job.undecodable)
        if shape is not None:
            return self._end_at_once(job, task, shape)
        try:
            return self._submit(job, task)
        except Exception as error:
            return self._end_at_once(job, task, failed_to_start_outcome(error))

    def _end_at_once(
        self, job: ClaimedJob, task: Task[Any, Any] | None, outcome: Outcome
    ) -> Running:
        running = Running(next(self._tokens), job, task, time.monotonic(), None)
        future: concurrent.futures.Future[Outcome] = concurrent.futures.Future()
        future.set_result(outcome)
        running.future = future
        future.add_done_callback(lambda done: self._finished(running, done))
        return running

    def _submit(self, job: ClaimedJob, task: Task[Any, Any]) -> Running:
        running = Running(next(self._tokens), job, task, time.monotonic(), None)
        running.executor = self.route(task, job.queue)
        if running.executor == "process":
            self._submit_to_pool(running, task)
            return running
        with self._lock:
            start_now = self._local_busy < self.concurrency
            if start_now:
                self._local_busy += 1
            else:
                self._local_waiting.append(running)
        if start_now:
            self._start_local(running, task)
        return running

    def _start_local(self, running: Running, task: Task[Any, Any], *, here: bool = False) -> bool:
        """Start a job that holds a local slot. ``here``: the caller is a job thread that
        just ended its job; a sync job is not handed to another thread (a wake-up and a
        context switch per job) but left to the caller to run: returns True then."""
        running.started = time.monotonic()
        if running.cancel_requested:
            future: concurrent.futures.Future[Outcome] = concurrent.futures.Future()
            future.set_result(CANCELLED_BEFORE_START)
        elif running.executor == "async":
            self._start_async(running, task)
            return False
        else:
            if task.timeout:
                running.deadline = running.started + task.timeout
            if here:
                return True
            self._threads.submit(self._thread_job, running, task)
            return False
        running.future = future
        future.add_done_callback(lambda done: self._finished(running, done))
        return False

    def _start_async(self, running: Running, task: Task[Any, Any]) -> None:
        """Hand the job to the runners on the event loop. From another thread it is
        queued: one wake-up of the loop starts every job queued meanwhile (a claim brings
        many jobs at once, and waking the loop's thread once per job cost more than the
        no-op jobs themselves). On the loop (a slot an async job freed), the runner that
        freed it takes it next."""
        loop = self._loop.get()
        if self._loop.on_it():
            self._async_ready.append((running, task))
            return
        with self._lock:
            self._async_starts.append((running, task))
            wake = len(self._async_starts) == 1
        if wake:
            loop.call_soon_threadsafe(self._start_queued_async, loop)

    def _start_queued_async(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the event loop: hand the queued jobs to the runners."""
        with self._lock:
            starts, self._async_starts = self._async_starts, []
        self._async_ready.extend(starts)
        self._wake_runner(loop)

    def _wake_runner(self, loop: asyncio.AbstractEventLoop) -> bool:
        """On the event loop: get one more runner going for the jobs waiting (an idle one,
        or a new one while there are fewer than slots); False when none can be."""
        if self._idle_runners:
            self._idle_runners.pop().set_result(None)
            return True
        if len(self._runners) < self.concurrency:
            self._runners.append(loop.create_task(self._runner(), name="pgtasks-async-runner"))
            return True
        return False

    def _spread(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the event loop, a pass after a runner took a job while others waited: that
        runner is awaiting inside its job, so wake one runner per job still waiting."""
        self._spreading = False
        for _ in range(len(self._async_ready)):
            if not self._wake_runner(loop):
                return

    async def _runner(self) -> None:
        """Runs async jobs one after the other on one asyncio task, as a job thread runs
        sync ones: no task, and no scheduling of the loop, per job. A job that ends
        without awaiting anything (or only what is ready) hands over to the next at once;
        one that awaits leaves the jobs waiting to the runners woken a pass later.

        Like sync jobs on their thread, the jobs of one runner share its context: a
        context variable a job sets and does not reset is seen by the runner's next job.
        """
        loop = asyncio.get_running_loop()
        # Python 3.11+ counts cancellation requests (asyncio.timeout and TaskGroup read
        # them); 3.10 does not.
        me = asyncio.current_task()
        cancelling = getattr(me, "cancelling", None)
        uncancel = getattr(me, "uncancel", None)
        ready = self._async_ready
        while True:
            while ready:
                running, task = ready.popleft()
                if ready and not self._spreading:
                    self._spreading = True
                    loop.call_soon(self._spread, loop)
                await self._run_async(running, task)
                # A cancellation meant for the job (cancel() of the job, its timeout)
                # is not the runner's: the next job starts with none pending.
                while cancelling is not None and uncancel is not None and cancelling():
                    uncancel()
            waiter: asyncio.Future[None] = loop.create_future()
            self._idle_runners.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                with contextlib.suppress(ValueError):
                    self._idle_runners.remove(waiter)
                return  # the worker is stopping

    def _thread_job(self, running: Running, task: Task[Any, Any]) -> None:
        """Sync jobs on a job thread: no Future per job, the outcome goes straight on.

        The job waiting for a slot (prefetched) takes this thread's slot and runs on this
        thread right away, rather than being handed to another one.
        """
        while True:
            try:
                if self._logs is None:
                    outcome = self._run_sync(running, task)
                else:
                    outcome = self._logs.call(running, self._run_sync, running, task)
            except BaseException as error:  # _run_sync catches everything; a last resort
                outcome = Outcome.failed(_retry.describe_error(error))
            following = self._pass_local_slot()
            self.on_finished(running, outcome)
            if following is None or following.task is None:
                return
            if not self._start_local(following, following.task, here=True):
                return
            running, task = following, following.task

    def _submit_to_pool(self, running: Running, task: Task[Any, Any]) -> None:
        if self._pool is None:
            self.uses_processes = True
            self._start_pool()  # a task registered after the worker started
        pool = self._pool
        if pool is None:
            raise RuntimeError("the process pool did not start")
        job = running.job
        if self._logs is not None:
            self._logs.register_child(running)
        message = JobMessage(
            token=running.token,
            job_id=job.id,
            task_name=job.task_name,
            queue=job.queue,
            args=job.args,
            kwargs=job.kwargs,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            worker_id=job.worker_id,
            soft_timeout=task.soft_timeout,
            meta=job.meta,
            capture_output=running.log is not None,
        )
        with self._lock:
            self._pool_jobs[running.token] = running
        pool.submit(PoolJob(message, task.timeout))

    def _finished(self, running: Running, future: concurrent.futures.Future[Outcome]) -> None:
        try:
            outcome = future.result()
        except BaseException as error:  # the wrappers catch everything; this is a last resort
            outcome = Outcome.failed(_retry.describe_error(error))
        if running.executor in ("thread", "async"):
            self._free_local_slot()
        self.on_finished(running, outcome)

    def _free_local_slot(self) -> None:
        following = self._pass_local_slot()
        if following is not None and following.task is not None:
            self._start_local(following, following.task)

    def _pass_local_slot(self) -> Running | None:
        """A local job ended: its slot goes to the first job waiting for one (returned,
        to be started by the caller), or is freed."""
        with self._lock:
            following = self._local_waiting.popleft() if self._local_waiting else None
            if following is None:
                self._local_busy -= 1
        return following

    def _pool_ended(self, token: int, ending: Ending) -> None:
        """Called on the pool's supervisor thread."""
        with self._lock:
            running = self._pool_jobs.pop(token, None)
        if running is not None and self._logs is not None:
            self._logs.forget_child(running)
        if running is None or running.task is None or ending.kind == "released":
            return  # released: the worker puts the job back itself
        outcome = attach(running.log, outcome_of_ending(running.task, running.job, ending))
        counted = self.on_counted
        for name, amount in outcome.counted if counted else ():  # a child's durable steps
            counted(name, amount)  # type: ignore[misc]
        self.on_finished(running, outcome)

    def expire(self, running: Running) -> Outcome:
        """Decide the outcome of a thread attempt past its deadline; its code keeps running."""
        return expire_attempt(running)

    # -- running --
    def _refusals(self, running: Running) -> Callable[[], None] | None:
        on_refused = self.on_refused
        return None if on_refused is None else lambda: on_refused(running)

    def _call_arguments(self, running: Running, task: Task[Any, Any]) -> list[Any]:
        job, cancelled, refused = running.job, running.is_cancel_requested, self._refusals(running)

        def context() -> JobContext:
            counted, parked = self.on_counted, running.park
            return attempt_context(task, job, cancelled, job.claimed_at, refused, counted, parked)

        return attempt_arguments(task, job.args, context)

    def cancel(self, running: Running) -> None:
        """Ask a running attempt to stop: the flag for sync tasks, cancel() for coroutines."""
        running.request_cancel()
        loop = self._loop.loop
        if loop is not None and running.async_task is not None:
            loop.call_soon_threadsafe(self._cancel_async_job, running)
        if running.executor == "process" and self._pool is not None:
            self._pool.cancel(running.token)

    def terminate(self, running: Running) -> None:
        """Stop a running attempt now: its process child is killed (SIGTERM, SIGKILL after
        the grace; the pool starts another), its coroutine cancelled. A thread cannot be
        killed: it gets the cancel flag, as cancel() gives it."""
        running.request_terminate()
        if running.executor == "process" and self._pool is not None:
            self._pool.terminate(running.token)
        else:
            self.cancel(running)

    @staticmethod
    def _cancel_async_job(running: Running) -> None:
        """On the event loop: cancel the runner's await inside this job, if the job is
        still on it (a runner runs one job after another)."""
        runner = running.async_task
        if runner is not None:
            runner.cancel()

    def _run_sync(self, running: Running, task: Task[Any, Any]) -> Outcome:
        instrumentation = task.app.instrumentation
        if instrumentation is None:  # the common case: no call to start a trace per job
            return self._run_sync_untraced(running, task)
        trace = running.trace = start_attempt_trace(instrumentation, running.job)
        if trace is None:
            return self._run_sync_untraced(running, task)
        with trace.activate():
            return self._run_sync_untraced(running, task)

    def _run_sync_untraced(self, running: Running, task: Task[Any, Any]) -> Outcome:
        job = running.job
        limit: SoftLimit | None = None
        try:
            try:
                if task.soft_timeout:
                    limit = self._soft_limits.begin(task.soft_timeout)
                value = task.function(*self._call_arguments(running, task), **job.kwargs)
            finally:
                if limit is not None:
                    self._soft_limits.end(limit)
        except BaseException as error:  # SystemExit in a task must not end the worker thread
            if running.trace is not None:
                running.trace.record_exception(error)
            return ending_of_error(task, job, error, self._refusals(running))
        return outcome_of_return(task, value)

    async def _run_async(self, running: Running, task: Task[Any, Any]) -> None:
        """An async job on its runner, from its start to its reported end."""
        try:
            if self._logs is None:
                outcome = await self._attempt_async(running, task)
            else:
                outcome = await self._logs.acall(running, self._attempt_async, running, task)
        except BaseException as error:  # _attempt_async catches everything; a last resort
            outcome = Outcome.failed(_retry.describe_error(error))
        running.async_task = None  # no longer this job's: a late cancel() is not for it
        following = self._pass_local_slot()
        # Ends are reported after every job the loop runs in this pass has had its turn: a
        # claim's jobs end together, and reach the worker as one batch.
        ended = self._async_ended
        ended.append((running, outcome))
        if len(ended) == 1:
            asyncio.get_running_loop().call_soon(self._report_async_ended)
        if following is not None and following.task is not None:
            self._start_local(following, following.task)

    def _report_async_ended(self) -> None:
        """On the event loop: report the async jobs that ended since the last report."""
        ended, self._async_ended = self._async_ended, []
        on_finished = self.on_finished
        for running, outcome in ended:
            on_finished(running, outcome)

    async def _attempt_async(self, running: Running, task: Task[Any, Any]) -> Outcome:
        running.async_task = asyncio.current_task()
        # Its run time (the automatic prefetch, durations in logs and metrics) counts from
        # here, not from its queueing for the loop: a busy loop's wait is not the job's.
        running.started = time.monotonic()
        if running.cancel_requested:
            return CANCELLED_BEFORE_START
        # Changed on the loop's thread only; the lag monitor copies it (list() of a set is
        # one step under the GIL), so no lock.
        self._async_jobs.add(running)
        try:
            trace = running.trace = start_attempt_trace(task.app.instrumentation, running.job)
            if trace is None:
                return await self._await_task(running, task)
            with trace.activate():
                return await self._await_task(running, task)
        finally:
            self._async_jobs.discard(running)

    async def _await_task(self, running: Running, task: Task[Any, Any]) -> Outcome:
        job = running.job
        started = running.started
        try:
            coroutine = task.function(*self._call_arguments(running, task), **job.kwargs)
            if task.timeout:
                value = await asyncio.wait_for(coroutine, task.timeout)
            else:
                value = await coroutine
        except asyncio.CancelledError as error:
            if running.terminate_requested:
                return Outcome.cancelled("Terminated: its task was cancelled on request")
            if running.cancel_requested:
                return Outcome.cancelled("CancelledError: the job was cancelled")
            return outcome_of_error(task, job.attempt, job.max_attempts, error)
        except asyncio.TimeoutError as error:
            if task.timeout and time.monotonic() - started >= task.timeout:
                return _retry.after_timeout(
                    task.timeout,
                    attempt=job.attempt,
                    max_attempts=job.max_attempts,
                    policy=policy_of(task),
                )
            return outcome_of_error(task, job.attempt, job.max_attempts, error)
        except BaseException as error:
            if running.trace is not None:
                running.trace.record_exception(error)
            refused = self._refusals(running)
            if isinstance(error, Snooze):  # parks the job: a round trip, off the loop
                return await asyncio.to_thread(ending_of_error, task, job, error, refused)
            return ending_of_error(task, job, error, refused)
        return outcome_of_return(task, value)

    def _on_loop(self, current: asyncio.Task[object] | None) -> str:
        return describe_async_jobs(list(self._async_jobs), current)

    # -- stopping --
    def take_unstarted(self) -> list[Running]:
        """Withdraw the jobs still waiting for a slot (they never ran; the worker releases them)."""
        with self._lock:
            waiting, self._local_waiting = list(self._local_waiting), collections.deque()
        if self._pool is not None:
            tokens = set(self._pool.withdraw_pending())
            with self._lock:
                waiting += [self._pool_jobs.pop(token) for token in tokens & set(self._pool_jobs)]
        for running in waiting:
            if running.log is not None and self._logs is not None:
                self._logs.forget_child(running)
        return waiting

    def stop_processes(self) -> None:
        """Terminate the pool's children (SIGTERM, then SIGKILL); return once they are gone.

        Their running jobs are not reported: the worker releases them.
        """
        if self._pool is not None:
            self._pool.close()

    def cancel_async(self) -> None:
        """Cancel every running coroutine (used when a shutdown deadline passes)."""
        self._loop.cancel_all()

    def shutdown(self) -> None:
        """Stop accepting work; running threads are not waited for (the worker decides)."""
        if self._logs is not None:
            self._logs.stop()
        self._threads.shutdown()
        self._soft_limits.stop()
        self.stop_processes()
        self._loop.stop(self._stop_loop)

    def _stop_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the event loop: end the idle runners, then stop the loop once they have."""
        for waiter in self._idle_runners:
            waiter.cancel()
        loop.call_soon(loop.stop)
