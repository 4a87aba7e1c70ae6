"""ProcessPool: child processes that run sync tasks, with hard time limits and recycling.

Not concurrent.futures.ProcessPoolExecutor: a job's child must be killable at its
deadline and replaceable, and a child's death must be pinned on the job it was running.
Each child has its own duplex Pipe; one supervisor thread owns every child and does all
sends, receives, kills and restarts, waiting on the pipes, the children's sentinels and
a wake-up pipe (submissions, cancellations and stop requests come from other threads).

Only the worker talks to the database about job state. The pool reports each job's end
through ``on_ended(token, Ending)``: the child's outcome, a hard timeout (after the child
is dead, so the attempt's code has stopped before the job can run again), the child's
death (signal or exit code), or a cancellation before start.

Hard limit: at the deadline the child gets SIGTERM (its task unwinds: ``finally`` blocks
run), then SIGKILL after ``kill_grace`` seconds. Recycling (``max_tasks_per_child``,
``max_memory_per_child``) happens between jobs: the child is told to exit and a fresh
one is started at once.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import dataclasses
import logging
import multiprocessing
import os
import signal
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any, Literal

from .._errors import ConfigurationError
from .._retry import Outcome
from . import joblogs
from .child import ChildSettings, JobMessage, child_main
from .pool_helpers import describe_exit, find_app_path
from .settings import ExecutorSettings, StartMethod

if TYPE_CHECKING:
    from .._app.app import App

logger = logging.getLogger("pgtasks.worker")

#: Seconds between SIGTERM and SIGKILL for a child past its hard time limit.
KILL_GRACE = 2.0
#: Seconds the pool waits for its first children to import the app.
START_TIMEOUT = 60.0
#: Longest pause between attempts to start a child that keeps failing.
MAX_RESTART_DELAY = 30.0


@dataclasses.dataclass(frozen=True)
class Ending:
    """How a job given to the pool ended.

    ``outcome``: the child returned ``outcome``. ``timeout``: it passed its hard time
    limit and its child was killed. ``lost``: its child died (``detail`` says how).
    ``cancelled``: cancelled before any child started it. ``released``: the pool was
    stopped with the job running (the worker puts it back without using an attempt).
    ``terminated``: its child was killed on request (:meth:`ProcessPool.terminate`).
    """

    kind: Literal["outcome", "timeout", "lost", "cancelled", "released", "terminated"]
    outcome: Outcome | None = None
    detail: str = ""
    pid: int | None = None


@dataclasses.dataclass(frozen=True)
class PoolJob:
    message: JobMessage
    timeout: float | None


@dataclasses.dataclass(eq=False)
class Child:
    process: BaseProcess
    conn: Connection[Any, Any]
    started_at: float
    pid: int = 0
    ready: bool = False
    job: PoolJob | None = None
    deadline: float | None = None
    jobs_done: int = 0
    #: Why the child is being stopped: None, "timeout", "recycle", "released", "stop",
    #: "terminated".
    stopping: str | None = None
    kill_at: float | None = None
    reading: bool = True


_live_pools: weakref.WeakSet[ProcessPool] = weakref.WeakSet()


def start_pool(
    app: App,
    settings: ExecutorSettings,
    task_names: set[str],
    *,
    on_ended: Callable[[int, Ending], None],
) -> ProcessPool:
    """Start the pool of ``settings``; its children must know every one of ``task_names``
    (the tasks that may run in it), or it is closed again with a ConfigurationError."""
    app_path = settings.app_path
    if settings.process_start_method == "spawn" and app_path is None:
        app_path = find_app_path(app)
        if app_path is None:
            raise ConfigurationError(
                "the process pool's spawned children must import the app, and this"
                " app is not a module-level variable: pass app_path='module:attribute'"
                " (the CLI passes -A), or use process_start_method='fork'"
            )
    memory = settings.max_memory_per_child
    pool = ProcessPool(
        app,
        size=settings.pool_size,
        start_method=settings.process_start_method,
        app_path=app_path,
        max_tasks_per_child=settings.max_tasks_per_child,
        max_memory_per_child=int(memory * 2**20) if memory is not None else None,
        on_ended=on_ended,
    )
    pool.start()
    missing = sorted(task_names - pool.child_tasks)
    if missing:
        pool.close(0.0)
        raise ConfigurationError(
            f"task(s) {', '.join(missing)} may run in the process pool, but the app its"
            f" children import ({app_path}) does not define them: register tasks when"
            " that module is imported, or use process_start_method='fork'"
        )
    return pool


@atexit.register
def _kill_leftover_children() -> None:
    """An embedding program exiting without stopping its worker: children go with it."""
    for pool in list(_live_pools):
        pool.kill_all()


class ProcessPool:
    """``size`` children running sync tasks; see the module docstring."""

    def __init__(
        self,
        app: App,
        *,
        size: int,
        start_method: StartMethod,
        app_path: str | None,
        max_tasks_per_child: int | None,
        max_memory_per_child: int | None,
        on_ended: Callable[[int, Ending], None],
        kill_grace: float = KILL_GRACE,
    ) -> None:
        self.app = app
        self.size = size
        self.start_method = start_method
        self.app_path = app_path
        self.max_tasks_per_child = max_tasks_per_child
        #: Bytes of resident memory after a job above which its child is replaced.
        self.max_memory_per_child = max_memory_per_child
        self.on_ended = on_ended
        self.kill_grace = kill_grace
        self._context = multiprocessing.get_context(start_method)
        self._children: list[Child] = []
        self._pending: collections.deque[PoolJob] = collections.deque()
        self._control: collections.deque[tuple[str, Any]] = collections.deque()
        self._lock = threading.Lock()
        self._wake_read, self._wake_write = os.pipe()
        for fd in (self._wake_read, self._wake_write):
            os.set_blocking(fd, False)
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._start_error: str | None = None
        self._closing = False
        self._restart_delay = 0.0
        self._restart_at = 0.0
        #: Task names the children's app defines (from the first ready child).
        self.child_tasks: frozenset[str] = frozenset()
        #: Counters (read by tests and logs).
        self.started_children = 0
        self.recycled = 0

    # -- control (any thread) --
    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the children; return once all imported the app (ConfigurationError if not)."""
        _live_pools.add(self)
        self._thread = threading.Thread(
            target=self._supervise, name="pgtasks-processes", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(timeout):
            self.close(0.0)
            raise ConfigurationError(
                f"the process pool did not start within {timeout:g} s (children importing"
                f" {self.app_path or 'the app'} took too long)"
            )
        if self._start_error is not None:
            self.close(0.0)
            raise ConfigurationError(
                f"process pool children could not load the app ({self.start_method}"
                f" start method, app {self.app_path or 'inherited'}): {self._start_error}"
            )

    def submit(self, job: PoolJob) -> None:
        with self._lock:
            self._pending.append(job)
        self._wake()

    def cancel(self, token: int) -> None:
        self._send_control("cancel", token)

    def terminate(self, token: int) -> None:
        """Kill the child running the job of ``token`` (SIGTERM, SIGKILL after the grace;
        a new child replaces it); a job no child started yet ends cancelled. The token is
        the attempt's own: a child that has moved on to another job is not touched."""
        self._send_control("terminate", token)

    def withdraw_pending(self) -> list[int]:
        """Tokens of the jobs no child has started yet, removed from the pool."""
        with self._lock:
            pending, self._pending = list(self._pending), collections.deque()
        return [job.message.token for job in pending]

    def close(self, grace: float = KILL_GRACE) -> None:
        """Stop all children (idle ones exit at once) and the supervisor thread."""
        self._send_control("close", grace)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(grace + 5.0)
        if thread is None or not thread.is_alive():
            self.kill_all()
            for fd in (self._wake_read, self._wake_write):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._wake_read = self._wake_write = -1
        _live_pools.discard(self)

    def kill_all(self) -> None:
        for child in list(self._children):
            if child.process.is_alive():
                with contextlib.suppress(ProcessLookupError, OSError):
                    os.kill(child.process.pid or 0, signal.SIGKILL)
                child.process.join(1.0)

    def pids(self) -> list[int]:
        """Pids of the children serving jobs (ready, not being stopped)."""
        with self._lock:
            return [c.pid for c in self._children if c.ready and c.stopping is None]

    def _send_control(self, action: str, argument: Any) -> None:
        self._control.append((action, argument))
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_write, b"x")

    # -- the supervisor thread --
    def _supervise(self) -> None:
        try:
            for _ in range(self.size):
                self._spawn()
            while not (self._closing and not self._children):
                self._apply_control()
                self._dispatch()
                self._wait_for_events()
                self._check_timers()
        except BaseException:
            logger.exception("process pool supervisor failed; stopping its children")
            self.kill_all()
            self._start_error = self._start_error or "the supervisor failed"
            self._ready.set()
            raise

    def _wait_for_events(self) -> None:
        timers = [c.deadline for c in self._children if c.deadline is not None]
        timers += [c.kill_at for c in self._children if c.kill_at is not None]
        if self._restart_at and len(self._serving()) < self.size and not self._closing:
            timers.append(self._restart_at)
        timeout = max(0.0, min(timers) - time.monotonic()) if timers else None
        waitables: list[Any] = [self._wake_read]
        waitables += [c.conn for c in self._children if c.reading]
        waitables += [c.process.sentinel for c in self._children]
        ready = set(wait(waitables, timeout))
        if self._wake_read in ready:
            with contextlib.suppress(BlockingIOError, OSError):
                while os.read(self._wake_read, 4096):
                    pass
        for child in list(self._children):
            if child.reading and child.conn in ready:
                self._receive(child)
        for child in list(self._children):
            if child.process.sentinel in ready:
                self._reap(child)

    def _serving(self) -> list[Child]:
        return [c for c in self._children if c.stopping is None]

    def _spawn(self) -> None:
        parent_end, child_end = self._context.Pipe(duplex=True)
        sibling_fds = [child.conn.fileno() for child in self._children if not child.conn.closed]
        inherited_fds = (*sibling_fds, self._wake_read, self._wake_write, parent_end.fileno())
        fork = self.start_method == "fork"
        settings = ChildSettings(
            app_path=None if fork else self.app_path,
            parent_pid=os.getpid(),
            log_level=logging.getLogger().getEffectiveLevel(),
            close_fds=inherited_fds if fork else (),
        )
        process = self._context.Process(  # type: ignore[attr-defined]
            target=child_main,
            args=(child_end, settings, self.app if fork else None),
            name="pgtasks-child",
            daemon=False,  # a task may start processes of its own
        )
        with warnings.catch_warnings():
            # Python 3.12+ warns about fork() in a threaded process: the user chose fork.
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            process.start()
        child_end.close()
        child = Child(process, parent_end, time.monotonic(), pid=process.pid or 0)
        with self._lock:
            self._children.append(child)
        self.started_children += 1

    def _apply_control(self) -> None:
        while self._control:
            action, argument = self._control.popleft()
            if action == "cancel":
                self._cancel(argument)
            elif action == "terminate":
                self._cancel(argument, terminate=True)
            elif action == "close":
                self._close(argument)

    def _cancel(self, token: int, *, terminate: bool = False) -> None:
        with self._lock:
            waiting = [job for job in self._pending if job.message.token == token]
            for job in waiting:
                self._pending.remove(job)
        if waiting:
            self.on_ended(token, Ending("cancelled"))
            return
        for child in self._children:
            if child.job is not None and child.job.message.token == token:
                self._send(child, ("cancel", token))
                if terminate and child.stopping is None:
                    logger.warning(
                        "job %d %s attempt %d: terminating worker child %d on request"
                        " (SIGTERM, SIGKILL after %g s)",
                        child.job.message.job_id,
                        child.job.message.task_name,
                        child.job.message.attempt,
                        child.pid,
                        self.kill_grace,
                        extra={"job_id": child.job.message.job_id},
                    )
                    self._terminate(child, "terminated", time.monotonic() + self.kill_grace)

    def _close(self, grace: float) -> None:
        self._closing = True
        with self._lock:
            pending, self._pending = list(self._pending), collections.deque()
        for job in pending:
            self.on_ended(job.message.token, Ending("released"))
        now = time.monotonic()
        for child in self._children:
            if child.job is not None:
                self._terminate(child, "released", now + grace)
            elif child.stopping is None:
                child.stopping = "stop"
                child.kill_at = now + grace
                if not self._send(child, ("exit",)):
                    self._signal(child, signal.SIGKILL)  # its pipe is gone: it is dying

    def _dispatch(self) -> None:
        if self._closing:
            return
        for child in self._children:
            if not self._pending:
                return
            if child.ready and child.job is None and child.stopping is None:
                with self._lock:
                    if not self._pending:
                        return
                    job = self._pending.popleft()
                    child.job = job
                if not self._send(child, ("run", job.message)):
                    with self._lock:  # the child is dying: the job never reached it
                        child.job = None
                        self._pending.appendleft(job)
                    child.stopping = "stop"
                    continue
                if job.timeout is not None:
                    child.deadline = time.monotonic() + job.timeout

    def _send(self, child: Child, message: tuple[Any, ...]) -> bool:
        try:
            child.conn.send(message)
        except (OSError, ValueError):
            return False
        return True

    def _signal(self, child: Child, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, OSError):
            os.kill(child.pid, signum)

    def _terminate(self, child: Child, reason: str, kill_at: float) -> None:
        """SIGTERM, announced over the pipe (a child ignores SIGTERMs it was not told of)."""
        child.stopping = reason
        child.deadline = None
        child.kill_at = kill_at
        self._send(child, ("terminate",))
        self._signal(child, signal.SIGTERM)

    def _check_timers(self) -> None:
        now = time.monotonic()
        for child in list(self._children):
            if child.deadline is not None and now >= child.deadline and child.job is not None:
                logger.warning(
                    "job %d %s attempt %d: hard time limit of %g s reached; terminating"
                    " worker child %d (SIGTERM, SIGKILL after %g s)",
                    child.job.message.job_id,
                    child.job.message.task_name,
                    child.job.message.attempt,
                    child.job.timeout or 0.0,
                    child.pid,
                    self.kill_grace,
                    extra={"job_id": child.job.message.job_id, "task": child.job.message.task_name},
                )
                self._terminate(child, "timeout", now + self.kill_grace)
            elif child.kill_at is not None and now >= child.kill_at:
                child.kill_at = None
                self._signal(child, signal.SIGKILL)
        if (
            not self._closing
            and self._restart_at
            and now >= self._restart_at
            and len(self._serving()) < self.size
        ):
            self._restart_at = 0.0
            self._top_up()

    def _top_up(self) -> None:
        """Start children until ``size`` serve jobs (ready or starting)."""
        if self._closing or self._restart_at:
            return
        while len(self._serving()) < self.size:
            self._spawn()

    def _receive(self, child: Child) -> None:
        while child.reading:
            try:
                if not child.conn.poll():
                    return
                message = child.conn.recv()
            except Exception:  # EOF or a message cut short by the child's death
                child.reading = False
                return
            self._handle(child, message)

    def _handle(self, child: Child, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "log":
            record = logging.makeLogRecord(message[1])
            record.pgtasks_child = True  # job logs: the attempt it names captures it
            logging.getLogger(record.name).handle(record)
        elif kind == "output":
            joblogs.child_output(message[1])
        elif kind == "ready":
            child.ready, child.pid = True, message[1]
            self.child_tasks = frozenset(message[2])
            self._restart_delay = 0.0
            if all(c.ready for c in self._serving()):
                self._ready.set()
        elif kind == "failed":
            self._start_failed(child, message[1])
        elif kind == "done":
            self._job_done(child, message[1], message[2], message[3])

    def _start_failed(self, child: Child, error: str) -> None:
        child.stopping = "stop"
        if not self._ready.is_set():
            self._start_error = error
            self._closing = True
            self._ready.set()
            return
        self._restart_delay = min(MAX_RESTART_DELAY, max(1.0, self._restart_delay * 2))
        self._restart_at = time.monotonic() + self._restart_delay
        logger.error(
            "a process pool child could not load the app (%s); retrying in %g s",
            error,
            self._restart_delay,
        )

    def _job_done(self, child: Child, token: int, outcome: Outcome, rss: int) -> None:
        job = child.job
        if job is None or job.message.token != token or child.stopping in ("timeout", "released"):
            return  # too late: the outcome was decided without it
        with self._lock:
            child.job, child.deadline = None, None
        child.jobs_done += 1
        self.on_ended(token, Ending("outcome", outcome, pid=child.pid))
        reason = self._recycle_reason(child, rss)
        if reason:
            self.recycled += 1
            logger.info("replacing worker child %d: %s", child.pid, reason)
            child.stopping = "recycle"
            child.kill_at = time.monotonic() + self.kill_grace
            if not self._send(child, ("exit",)):
                self._signal(child, signal.SIGKILL)  # its pipe is gone: it is dying
            self._top_up()

    def _recycle_reason(self, child: Child, rss: int) -> str | None:
        if self.max_tasks_per_child is not None and child.jobs_done >= self.max_tasks_per_child:
            return f"it ran {child.jobs_done} job(s) (max_tasks_per_child)"
        if self.max_memory_per_child is not None and rss > self.max_memory_per_child:
            return (
                f"its resident memory after a job is {rss / 2**20:.0f} MB, over"
                f" {self.max_memory_per_child / 2**20:.0f} MB (max_memory_per_child)"
            )
        return None

    def _reap(self, child: Child) -> None:
        self._receive(child)  # what it sent before dying ("done" included)
        child.process.join(1.0)
        exitcode = child.process.exitcode
        with self._lock:
            if child in self._children:
                self._children.remove(child)
            job, child.job = child.job, None
        with contextlib.suppress(OSError):
            child.conn.close()
        with contextlib.suppress(ValueError, AttributeError):
            child.process.close()
        if not child.ready and child.stopping is None:
            self._start_failed(child, f"it exited with {describe_exit(exitcode)} while starting")
        if job is not None:
            token = job.message.token
            if child.stopping == "timeout":
                ending = Ending("timeout", detail=describe_exit(exitcode), pid=child.pid)
                self.on_ended(token, ending)
            elif child.stopping == "released":
                self.on_ended(token, Ending("released", pid=child.pid))
            elif child.stopping == "terminated":
                ending = Ending("terminated", detail=describe_exit(exitcode), pid=child.pid)
                self.on_ended(token, ending)
            else:
                detail = (
                    f"worker child {child.pid} exited with {describe_exit(exitcode)} while"
                    " running this attempt"
                )
                logger.warning(
                    "job %d %s attempt %d: %s",
                    job.message.job_id,
                    job.message.task_name,
                    job.message.attempt,
                    detail,
                    extra={"job_id": job.message.job_id, "task": job.message.task_name},
                )
                self.on_ended(token, Ending("lost", detail=detail, pid=child.pid))
        elif child.stopping is None and not self._closing:
            logger.warning(
                "worker child %d exited with %s while idle", child.pid, describe_exit(exitcode)
            )
        if not self._closing:
            self._top_up()
