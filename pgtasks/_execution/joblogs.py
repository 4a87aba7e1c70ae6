"""Log lines per attempt: what a task writes through ``logging`` (and, in a process-pool
child, to stdout and stderr), captured while its attempt runs and stored with the job.

One logging handler on the root logger (installed once per process while a worker with
job logs runs) hands each record to the attempt it belongs to: the one the current
thread or asyncio task runs (a context variable the executor sets around the task's
code), or, for a record forwarded by a pool child, the attempt it names (worker, job,
attempt). An attempt keeps at most ``max_records`` lines and ``max_bytes`` of text; what
does not fit is counted (``dropped``), and a line cut to fit says so. The password of the
connection string is scrubbed from each line when it is captured, as error texts are.

Records from the capture level up (``Worker(job_logs="DEBUG")``; INFO by default) are
captured whatever the root logger's level: while capture is installed, a root level above
it is lowered to it, and the handlers that were there (on the root, and on loggers that
take their level from it) get a filter that keeps their output as it was; the ``pgtasks``
logger keeps the old level, so the worker's own records cost what they did.

Threads a task starts follow it (``Thread.start`` while capture is installed hands the
starting thread's attempt to the new thread), and so does work it submits to any
``ThreadPoolExecutor`` (``submit`` runs the function under the submitter's attempt;
the executor's own threads are not tied to one). A record that comes after its attempt
ended is not kept.

The lines reach the database in the round trip that writes the attempt's outcome, just
before it in the same transaction (update_job_logs, for the attempts that logged only), in
meta key ``pgtasks.logs``: ``{"<attempt>": {"lines": [[seconds since the epoch, level,
logger, text], ...], "dropped": n}}``; they move to jobs_history with the job and are
pruned with it. While it runs, the heartbeat writes the lines of attempts that logged
since its last beat (the job page shows them live). No I/O here.
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.thread
import contextvars
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .._dsn import redact
from .._errors import ConfigurationError
from .._retry import Outcome
from .._text import storable

if TYPE_CHECKING:
    from .running import Running

#: Characters of one line kept at most (a longer one is cut, and says so).
MAX_LINE_CHARS = 4000

#: The attempt the current thread or asyncio task runs (None: no capture).
CURRENT: contextvars.ContextVar[AttemptLog | None] = contextvars.ContextVar(
    "pgtasks_attempt_log", default=None
)


#: Capture from this level by default (``Worker(job_logs=True)``).
DEFAULT_LEVEL = logging.INFO
_LEVEL_NAMES = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def capture_level(value: object) -> int | None:
    """``Worker(job_logs=...)`` as the lowest level captured: True (INFO), a level's
    name (``"debug"``) or number; None for False (no capture)."""
    if value is True:
        return DEFAULT_LEVEL
    if value is False or value is None:
        return None
    if isinstance(value, str) and value.strip().upper() in _LEVEL_NAMES:
        return int(logging.getLevelName(value.strip().upper()))
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 50:
        return value
    raise ConfigurationError(
        f"job_logs= must be True, False or a level ({', '.join(_LEVEL_NAMES)} or 1..50),"
        f" got {value!r:.80}"
    )


@dataclasses.dataclass(frozen=True)
class LogLimits:
    """How much of an attempt's log is kept."""

    max_records: int = 200
    max_bytes: int = 64 * 1024


class AttemptLog:
    """The lines of one attempt, capped; any thread may add (a lock guards them)."""

    __slots__ = (
        "_lock",
        "bytes",
        "closed",
        "dropped",
        "flushed",
        "level",
        "limits",
        "lines",
        "secrets",
    )

    def __init__(
        self, limits: LogLimits, secrets: tuple[str, ...], level: int = DEFAULT_LEVEL
    ) -> None:
        self.limits = limits
        self.secrets = secrets
        #: The lowest level kept; closed: the attempt ended (later records are not kept).
        self.level = level
        self.closed = False
        self.lines: list[list[Any]] = []
        self.bytes = 0
        self.dropped = 0
        #: Lines and drops already written by a live flush (the heartbeat's).
        self.flushed = (0, 0)
        self._lock = threading.Lock()

    def add(self, created: float, level: str, name: str, text: str) -> None:
        if "postgres" in text or "password" in text:  # what redact's patterns look for
            text = redact(text, self.secrets)
        else:
            for secret in self.secrets:
                if secret in text:
                    text = text.replace(secret, "***")
        text = storable(text)
        if len(text) > MAX_LINE_CHARS:
            text = f"{text[:MAX_LINE_CHARS]} [… {len(text) - MAX_LINE_CHARS} characters cut]"
        size = len(text) if text.isascii() else len(text.encode("utf-8", "backslashreplace"))
        size += len(name) + 40
        with self._lock:
            limits = self.limits
            if len(self.lines) >= limits.max_records or self.bytes + size > limits.max_bytes:
                self.dropped += 1
                return
            self.bytes += size
            self.lines.append([round(created, 3), level, storable(name), text])

    @property
    def empty(self) -> bool:
        return not self.lines and not self.dropped

    def document(self) -> dict[str, Any]:
        with self._lock:
            return {"lines": list(self.lines), "dropped": self.dropped}

    def to_json(self) -> str:
        return json.dumps(self.document(), ensure_ascii=False, separators=(",", ":"))

    def unflushed(self) -> str | None:
        """The document, when lines came (or were dropped) since the last live flush."""
        with self._lock:
            state = (len(self.lines), self.dropped)
            if state == self.flushed:
                return None
            self.flushed = state
        return self.to_json()


#: Attempts running in pool children of this process, by (worker id, job id, attempt).
_children: dict[tuple[int, int, int], AttemptLog] = {}
_install_lock = threading.Lock()


class CaptureHandler(logging.Handler):
    """Hands records to the attempt they belong to (see the module docstring)."""

    def handle(self, record: logging.LogRecord) -> bool:  # no handler lock: the log has one
        log = CURRENT.get()
        if log is None:
            fields = record.__dict__
            if not fields.get("pgtasks_child"):
                return False
            key = (fields.get("worker_id"), fields.get("job_id"), fields.get("attempt"))
            log = _children.get(key)  # type: ignore[arg-type]
            if log is None:
                return False
        if record.levelno < log.level or log.closed:
            return False
        try:
            text = record.getMessage()
            if record.exc_info and not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            if record.exc_text:
                text = f"{text}\n{record.exc_text}"
            log.add(record.created, record.levelname, record.name, text)
        except Exception:  # a record that cannot be formatted is not the job's end
            log.add(record.created, "ERROR", "pgtasks.logs", "a log record could not be formatted")
        return True

    def emit(self, record: logging.LogRecord) -> None:
        self.handle(record)


_handler = CaptureHandler()


class _Below(logging.Filter):
    """Keeps a handler's output as it was before the root's level was lowered."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self.level


@dataclasses.dataclass
class _Lowered:
    """What lowering the root's level changed, to undo it."""

    root_before: int
    root_after: int
    pinned: bool
    filtered: list[tuple[logging.Handler, _Below]]


#: The capture levels of the installed captures (one per worker of the process).
_levels: list[int] = []
_lowered: _Lowered | None = None


def _takes_root_level(logger: logging.Logger) -> bool:
    """Whether ``logger``'s level is the root's (no logger on its way up has one)."""
    node: logging.Logger | None = logger
    while node is not None and node.parent is not None:
        if node.level:
            return False
        node = node.parent
    return True


def _lower(level: int) -> _Lowered | None:
    """Records from ``level`` up reach the root's handlers (see the module docstring)."""
    root = logging.getLogger()
    before = root.level
    if not before or level >= before:
        return None
    ours = logging.getLogger("pgtasks")
    pinned = not ours.level
    if pinned:
        ours.setLevel(before)
    loggers = [root] + [
        each
        for each in list(logging.Logger.manager.loggerDict.values())
        if isinstance(each, logging.Logger) and each.handlers and _takes_root_level(each)
    ]
    filtered = []
    for logger in loggers:
        for handler in list(logger.handlers):
            if handler is not _handler:
                below = _Below(before)
                handler.addFilter(below)
                filtered.append((handler, below))
    root.setLevel(level)
    return _Lowered(before, level, pinned, filtered)


def _restore(lowered: _Lowered) -> None:
    root = logging.getLogger()
    if root.level == lowered.root_after:  # else configured since: left as it is
        root.setLevel(lowered.root_before)
    ours = logging.getLogger("pgtasks")
    if lowered.pinned and ours.level == lowered.root_before:
        ours.setLevel(logging.NOTSET)
    for handler, below in lowered.filtered:
        handler.removeFilter(below)


def _start_in_attempt(thread: threading.Thread) -> None:
    """``Thread.start`` while capture is installed: a thread started under an attempt
    (not a ThreadPoolExecutor's own: ``submit`` carries those) runs under it too."""
    log = CURRENT.get()
    if log is not None and getattr(thread, "_target", None) is not _pool_worker:
        run = thread.run

        def run_in_attempt() -> None:
            CURRENT.set(log)
            run()

        thread.run = run_in_attempt  # type: ignore[method-assign]
    _thread_start(thread)


def _in_attempt(log: AttemptLog, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    token = CURRENT.set(log)
    try:
        return function(*args, **kwargs)
    finally:
        CURRENT.reset(token)


def _submit_in_attempt(
    executor: concurrent.futures.ThreadPoolExecutor,
    function: Callable[..., Any],
    /,
    *args: Any,
    **kwargs: Any,
) -> concurrent.futures.Future[Any]:
    """``ThreadPoolExecutor.submit`` while capture is installed: the function runs under
    the submitter's attempt."""
    log = CURRENT.get()
    if log is None:
        return _pool_submit(executor, function, *args, **kwargs)
    return _pool_submit(executor, _in_attempt, log, function, *args, **kwargs)


_thread_start = threading.Thread.start
_pool_submit = concurrent.futures.ThreadPoolExecutor.submit
_pool_worker = getattr(concurrent.futures.thread, "_worker", None)


def _apply() -> None:
    """Install, change or remove the capture for the levels of ``_levels`` (lock held)."""
    global _lowered
    if _lowered is not None:
        _restore(_lowered)
        _lowered = None
    if not _levels:
        logging.getLogger().removeHandler(_handler)
        if threading.Thread.start is _start_in_attempt:  # else patched since: left as it is
            threading.Thread.start = _thread_start  # type: ignore[method-assign]
        if concurrent.futures.ThreadPoolExecutor.submit is _submit_in_attempt:
            concurrent.futures.ThreadPoolExecutor.submit = _pool_submit  # type: ignore[method-assign]
        return
    logging.getLogger().addHandler(_handler)  # once: a handler is added at most once
    threading.Thread.start = _start_in_attempt  # type: ignore[method-assign,assignment]
    concurrent.futures.ThreadPoolExecutor.submit = _submit_in_attempt  # type: ignore[method-assign,assignment]
    _lowered = _lower(min(_levels))


def install(level: int = DEFAULT_LEVEL) -> None:
    """Capture from ``level`` on from now on (counted: each worker installs once)."""
    with _install_lock:
        _levels.append(level)
        _apply()


def uninstall(level: int = DEFAULT_LEVEL) -> None:
    with _install_lock:
        if level in _levels:
            _levels.remove(level)
        _apply()


class JobLogs:
    """An executor's capture: a log per attempt it runs, attached to its outcome."""

    def __init__(self, limits: LogLimits | None = None, level: int = DEFAULT_LEVEL) -> None:
        self.limits = limits or LogLimits()
        self.level = level
        self.secrets: tuple[str, ...] = ()
        self.started = False

    def start(self, secrets: tuple[str, ...]) -> None:
        """Capture from now on; ``secrets``: the forms of the password to scrub."""
        self.secrets = secrets
        if not self.started:
            self.started = True
            install(self.level)

    def stop(self) -> None:
        if self.started:
            self.started = False
            uninstall(self.level)

    def call(self, running: Running, function: Callable[..., Outcome], *args: Any) -> Outcome:
        """Run ``function`` with a new log as the current attempt's; its outcome with the
        lines."""
        log = running.log = AttemptLog(self.limits, self.secrets, self.level)
        token = CURRENT.set(log)
        try:
            outcome = function(*args)
        finally:
            CURRENT.reset(token)
            log.closed = True
        return attach(log, outcome)

    async def acall(
        self, running: Running, function: Callable[..., Awaitable[Outcome]], *args: Any
    ) -> Outcome:
        """:meth:`call` for a coroutine (on the runner's task: set, then reset)."""
        log = running.log = AttemptLog(self.limits, self.secrets, self.level)
        token = CURRENT.set(log)
        try:
            outcome = await function(*args)
        finally:
            CURRENT.reset(token)
            log.closed = True
        return attach(log, outcome)

    def register_child(self, running: Running) -> None:
        """A log for an attempt a pool child runs (the records it forwards name it)."""
        running.log = AttemptLog(self.limits, self.secrets, self.level)
        _children[_child_key(running)] = running.log

    @staticmethod
    def forget_child(running: Running) -> None:
        _children.pop(_child_key(running), None)


def _child_key(running: Running) -> tuple[int, int, int]:
    job = running.job
    return (job.worker_id, job.id, job.attempt)


def attach(log: AttemptLog | None, outcome: Outcome) -> Outcome:
    """``outcome`` carrying the attempt's lines (unchanged when it logged nothing)."""
    if log is None or log.empty:
        return outcome
    return dataclasses.replace(outcome, logs_json=log.to_json())


def child_output(fields: dict[str, Any]) -> None:
    """A line a pool child's task wrote to stdout or stderr (the supervisor's thread)."""
    key = (fields.get("worker_id"), fields.get("job_id"), fields.get("attempt"))
    log = _children.get(key)  # type: ignore[arg-type]
    if log is not None:
        stream, created = str(fields.get("stream")), float(fields.get("created") or time.time())
        log.add(created, stream, stream, str(fields.get("text")))
