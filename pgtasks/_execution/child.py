"""The main loop of a process-pool child: run the jobs the worker sends, return outcomes.

A child never writes a job's state (status, result): it receives a :class:`JobMessage`
(task name, arguments, the job's context fields), runs the task, and sends back the
attempt's Outcome and its resident memory.
The parent writes the outcome, fenced, with everything else (see process_pool.py). The only
write a child makes is a task's own meta/progress update (JobContext.update_meta), fenced by
the lease, on the child's own connection.

Two threads: the main thread runs tasks (so ``signal.setitimer`` can raise
SoftTimeLimitExceeded in it and SIGTERM can unwind it), and a reader thread receives
messages (jobs, cancellations, exit), and exits the process when the parent is gone.

Messages, parent → child: ``("run", JobMessage)``, ``("cancel", token)``, ``("exit",)``,
and ``("terminate",)`` just before the worker's own SIGTERM (others' SIGTERMs are ignored).
Child → parent: ``("ready", pid, task_names)`` or ``("failed", error)`` once, then
``("done", token, outcome, rss_bytes, seconds)`` per job and ``("log", record_fields)``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import queue
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from types import FrameType
from typing import Any

from .._app.app import App
from .._app.loading import load_app
from .._app.tasks import Task
from .._errors import ConfigurationError, SoftTimeLimitExceeded
from .._instrumentation import AttemptTrace, outcome_name, start_attempt_trace
from .._jobs import JobContext
from .._retry import Outcome
from .outcomes import outcome_of_return, unknown_task_outcome
from .steps import attempt_arguments, attempt_context, ending_of_error, settled

#: Seconds between checks that the parent is still alive.
PARENT_CHECK_INTERVAL = 1.0
#: Seconds a SIGTERM handler waits for the worker's "terminate" message that precedes its
#: own SIGTERM; without one, the signal came from someone else and is ignored.
TERMINATE_MESSAGE_WAIT = 0.5

#: Set by the reader thread when the worker announces that it is terminating this child.
_termination_requested = threading.Event()


@dataclasses.dataclass(frozen=True)
class JobMessage:
    """One attempt, as sent to a child."""

    token: int
    job_id: int
    task_name: str
    queue: str
    args: list[Any]
    kwargs: dict[str, Any]
    attempt: int
    max_attempts: int
    worker_id: int
    soft_timeout: float | None
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Send what the task writes to stdout and stderr to the worker too (job logs).
    capture_output: bool = False


@dataclasses.dataclass(frozen=True)
class ChildSettings:
    """How a child starts: where its app comes from and where its logs go."""

    #: ``module:attribute`` a spawned child imports (None: a forked child, which runs
    #: the App it inherited).
    app_path: str | None
    parent_pid: int
    log_level: int
    #: File descriptors a forked child inherited but must not hold (siblings' pipes).
    close_fds: tuple[int, ...] = ()


class _Terminated(BaseException):
    """SIGTERM arrived: unwind the task (its ``finally`` blocks run), then exit."""


def resident_bytes() -> int:
    """This process's resident set size now (Linux), else its peak (getrusage)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


class Channel:
    """The child's end of its pipe; sends are serialised (tasks may log from threads)."""

    def __init__(self, conn: Connection[Any, Any]) -> None:
        self.conn = conn
        self._lock = threading.Lock()

    def send(self, message: tuple[Any, ...]) -> None:
        with self._lock:
            self.conn.send(message)


class CurrentJob:
    """The attempt the main thread is running, as seen by the reader thread and logging."""

    def __init__(self) -> None:
        self.message: JobMessage | None = None
        self.cancel_event = threading.Event()
        self._cancelled: set[int] = set()
        self._lock = threading.Lock()

    def begin(self, message: JobMessage) -> threading.Event:
        with self._lock:
            self.message = message
            self.cancel_event = threading.Event()
            if message.token in self._cancelled:
                self._cancelled.discard(message.token)
                self.cancel_event.set()
            return self.cancel_event

    def end(self) -> None:
        with self._lock:
            self.message = None

    def cancel(self, token: int) -> None:
        with self._lock:
            if self.message is not None and self.message.token == token:
                self.cancel_event.set()
            else:
                self._cancelled.add(token)  # the run message is still queued

    def log_fields(self) -> dict[str, Any]:
        message = self.message
        if message is None:
            return {}
        return {
            "job_id": message.job_id,
            "task": message.task_name,
            "attempt": message.attempt,
            "worker_id": message.worker_id,
        }


class PipeHandler(logging.Handler):
    """Forwards records to the parent, which hands them to its own handlers."""

    def __init__(self, channel: Channel, current: CurrentJob) -> None:
        super().__init__()
        self.channel = channel
        self.current = current

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields = dict(record.__dict__)
            fields["msg"] = record.getMessage()
            fields["args"] = None
            if record.exc_info:
                fields["exc_text"] = logging.Formatter().formatException(record.exc_info)
            fields["exc_info"] = None
            for key, value in self.current.log_fields().items():
                fields.setdefault(key, value)
            portable = {
                key: value
                if value is None or isinstance(value, (str, int, float, bool))
                else str(value)
                for key, value in fields.items()
            }
            self.channel.send(("log", portable))
        except Exception:
            self.handleError(record)


class SoftLimit:
    """SIGALRM-based soft time limit for the main thread (where tasks run)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.active = False
        self.fired = False

    def install(self) -> None:
        signal.signal(signal.SIGALRM, self._on_alarm)

    def arm(self, seconds: float | None) -> None:
        self.fired = False
        if seconds:
            self.seconds = seconds
            self.active = True
            signal.setitimer(signal.ITIMER_REAL, seconds)

    def disarm(self) -> None:
        if self.active:
            self.active = False
            signal.setitimer(signal.ITIMER_REAL, 0)

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        if self.active and not self.fired:
            self.fired = True
            raise SoftTimeLimitExceeded(
                f"the task ran past its soft time limit of {self.seconds:g} s"
            )


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """Unwind when the worker terminates this child; ignore anyone else's SIGTERM.

    A service manager that signals the whole process group (systemd's default
    KillMode) must not kill the jobs the worker is letting finish during its graceful
    shutdown: the worker decides when children stop, and says so over the pipe first.
    """
    if _termination_requested.wait(TERMINATE_MESSAGE_WAIT):
        raise _Terminated
    logging.getLogger("pgtasks.worker").warning(
        "worker child %d: ignoring a SIGTERM the worker did not send (signal the worker"
        " process; it stops its children)",
        os.getpid(),
    )


def _read(
    conn: Connection[Any, Any],
    inbox: queue.SimpleQueue[JobMessage | None],
    current: CurrentJob,
    parent_pid: int,
) -> None:
    """Reader thread: jobs to the inbox, cancellations to the current job."""
    while True:
        try:
            if not conn.poll(PARENT_CHECK_INTERVAL):
                if os.getppid() != parent_pid:
                    os._exit(70)  # the worker died: its jobs will be rescued elsewhere
                continue
            message = conn.recv()
        except (EOFError, OSError):
            os._exit(0)  # the worker closed the pipe (it has stopped)
        if message[0] == "run":
            inbox.put(message[1])
        elif message[0] == "cancel":
            current.cancel(message[1])
        elif message[0] == "exit":
            inbox.put(None)
        elif message[0] == "terminate":
            _termination_requested.set()


def run_job(
    app: App, message: JobMessage, cancel_event: threading.Event, soft: SoftLimit
) -> Outcome:
    """Run one attempt in this (main) thread; SIGTERM unwinds it as _Terminated."""
    task = app.tasks.get(message.task_name)
    if task is None:
        return unknown_task_outcome(message.task_name, app)
    # The child writes meta and checkpoints itself, on a connection of its own (opened on
    # first use), fenced by the lease like the worker's writes: the parent is not involved.
    # It counts its steps and tells them with the outcome.
    counts: dict[str, int] = {}
    parked: list[bool] = []

    def counted(name: str, amount: int) -> None:
        counts[name] = counts.get(name, 0) + amount

    def context() -> JobContext:
        cancelled, park = cancel_event.is_set, lambda: parked.append(True)
        return attempt_context(task, message, cancelled, None, None, counted, park)

    arguments = attempt_arguments(task, message.args, context)
    trace = start_attempt_trace(app.instrumentation, message)
    if trace is None:
        return settled(_call(task, message, arguments, soft), counts, bool(parked))
    # The attempt's span lives here, in the child: it ends with the outcome decided here
    # (a write the parent finds fenced out is not reflected in it).
    outcome: Outcome | None = None
    try:
        with trace.activate():
            outcome = _call(task, message, arguments, soft, trace)
        return settled(outcome, counts, bool(parked))
    finally:
        name = outcome_name(outcome) if outcome is not None else "failed"
        try:
            trace.end(name, outcome.error if outcome is not None else "terminated")
        except Exception:
            logging.getLogger("pgtasks.worker").exception("ending the trace of a job failed")


def _flush_traces(app: App) -> None:
    """Before a clean exit: export the spans a batching processor still holds."""
    if app.instrumentation is None:
        return
    try:
        app.instrumentation.flush()
    except Exception:
        logging.getLogger("pgtasks.worker").exception("flushing this child's traces failed")


def _call(
    task: Task[Any, Any],
    message: JobMessage,
    arguments: list[Any],
    soft: SoftLimit,
    trace: AttemptTrace | None = None,
) -> Outcome:
    try:
        try:
            soft.arm(message.soft_timeout)
            value = task.function(*arguments, **message.kwargs)
        finally:
            soft.disarm()
    except _Terminated:
        raise
    except BaseException as error:  # SystemExit in a task must not end the child
        if trace is not None:
            trace.record_exception(error)
        return ending_of_error(task, message, error)
    return outcome_of_return(task, value)


class _Tee:
    """A stream that writes through and sends each line to the worker (job logs)."""

    def __init__(self, stream: Any, name: str, channel: Channel, current: CurrentJob) -> None:
        self.stream, self.name, self.channel, self.current = stream, name, channel, current
        self.pending = ""

    def write(self, text: str) -> int:
        written = self.stream.write(text)
        self.pending += text
        while "\n" in self.pending:
            line, self.pending = self.pending.split("\n", 1)
            self._send(line)
        return int(written or len(text))

    def _send(self, line: str) -> None:
        fields = {**self.current.log_fields(), "stream": self.name, "text": line}
        fields["created"] = time.time()
        with contextlib.suppress(Exception):
            self.channel.send(("output", fields))

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


class _Captured:
    """stdout and stderr teed for one job; close() puts them back."""

    def __init__(self, channel: Channel, current: CurrentJob) -> None:
        self.saved = (sys.stdout, sys.stderr)
        self.tees = (
            _Tee(sys.stdout, "stdout", channel, current),
            _Tee(sys.stderr, "stderr", channel, current),
        )
        sys.stdout, sys.stderr = self.tees

    def close(self) -> None:
        sys.stdout, sys.stderr = self.saved
        for tee in self.tees:
            if tee.pending:
                tee._send(tee.pending)
                tee.pending = ""


def _configure_logging(channel: Channel, current: CurrentJob, level: int) -> None:
    root = logging.getLogger()
    root.handlers = [PipeHandler(channel, current)]  # inherited handlers are the parent's
    root.setLevel(level)


def child_main(
    conn: Connection[Any, Any], settings: ChildSettings, inherited_app: App | None = None
) -> None:
    """Entry point of a child (spawn: imports the app; fork: uses the inherited one)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the worker; it decides
    signal.signal(signal.SIGTERM, _on_sigterm)
    for fd in settings.close_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    channel = Channel(conn)
    current = CurrentJob()
    _configure_logging(channel, current, settings.log_level)
    soft = SoftLimit()
    soft.install()
    try:
        try:
            if inherited_app is not None:
                app = inherited_app
            elif settings.app_path is not None:
                app = load_app(settings.app_path)
            else:
                raise ConfigurationError("a spawned child needs the app's module:attribute path")
        except Exception as error:
            channel.send(("failed", f"{type(error).__name__}: {error}"))
            return
        channel.send(("ready", os.getpid(), sorted(app.tasks)))
        inbox: queue.SimpleQueue[JobMessage | None] = queue.SimpleQueue()
        reader = threading.Thread(
            target=_read,
            args=(conn, inbox, current, settings.parent_pid),
            name="pgtasks-child-reader",
            daemon=True,
        )
        reader.start()
        while True:
            message = inbox.get()
            if message is None:
                _flush_traces(app)
                return
            cancel_event = current.begin(message)
            started = time.monotonic()
            output = _Captured(channel, current) if message.capture_output else None
            try:
                outcome = run_job(app, message, cancel_event, soft)
            finally:
                if output is not None:
                    output.close()
                current.end()
            channel.send(
                (
                    "done",
                    message.token,
                    outcome,
                    resident_bytes(),
                    time.monotonic() - started,
                )
            )
    except _Terminated:
        # Die of the signal itself, so the parent sees "signal 15", not an exit code.
        logging.shutdown()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
