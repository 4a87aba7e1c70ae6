"""Log lines per attempt: what a task writes through ``logging`` (and, in a process-pool
child, to stdout and stderr), captured while its attempt runs and stored with the job.

One logging handler on the root logger (installed once per process while a worker with
job logs runs) hands each record to the attempt it belongs to: the one the current
thread or asyncio task runs (a context variable the executor sets around the task's
code), or, for a record forwarded by a pool child, the attempt it names (worker, job,
attempt). An attempt keeps at most ``max_records`` lines and ``max_bytes`` of text; what
does not fit is counted (``dropped``), and a line cut to fit says so. The password of the
connection string is scrubbed from each line when it is captured, as error texts are.

The lines reach the database in the round trip that writes the attempt's outcome, just
before it in the same transaction (update_job_logs, for the attempts that logged only), in
meta key ``pgtasks.logs``: ``{"<attempt>": {"lines": [[seconds since the epoch, level,
logger, text], ...], "dropped": n}}``; they move to jobs_history with the job and are
pruned with it. While it runs, the heartbeat writes the lines of attempts that logged
since its last beat (the job page shows them live). No I/O here.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .._dsn import redact
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


@dataclasses.dataclass(frozen=True)
class LogLimits:
    """How much of an attempt's log is kept."""

    max_records: int = 200
    max_bytes: int = 64 * 1024


class AttemptLog:
    """The lines of one attempt, capped; any thread may add (a lock guards them)."""

    __slots__ = ("_lock", "bytes", "dropped", "flushed", "limits", "lines", "secrets")

    def __init__(self, limits: LogLimits, secrets: tuple[str, ...]) -> None:
        self.limits = limits
        self.secrets = secrets
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
_installed = 0
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


def install() -> None:
    """Capture from now on (counted: each worker of the process installs once)."""
    global _installed
    with _install_lock:
        _installed += 1
        if _installed == 1:
            logging.getLogger().addHandler(_handler)


def uninstall() -> None:
    global _installed
    with _install_lock:
        _installed = max(0, _installed - 1)
        if _installed == 0:
            logging.getLogger().removeHandler(_handler)


class JobLogs:
    """An executor's capture: a log per attempt it runs, attached to its outcome."""

    def __init__(self, limits: LogLimits | None = None) -> None:
        self.limits = limits or LogLimits()
        self.secrets: tuple[str, ...] = ()
        self.started = False

    def start(self, secrets: tuple[str, ...]) -> None:
        """Capture from now on; ``secrets``: the forms of the password to scrub."""
        self.secrets = secrets
        if not self.started:
            self.started = True
            install()

    def stop(self) -> None:
        if self.started:
            self.started = False
            uninstall()

    def call(self, running: Running, function: Callable[..., Outcome], *args: Any) -> Outcome:
        """Run ``function`` with a new log as the current attempt's; its outcome with the
        lines."""
        log = running.log = AttemptLog(self.limits, self.secrets)
        token = CURRENT.set(log)
        try:
            outcome = function(*args)
        finally:
            CURRENT.reset(token)
        return attach(log, outcome)

    async def acall(
        self, running: Running, function: Callable[..., Awaitable[Outcome]], *args: Any
    ) -> Outcome:
        """:meth:`call` for a coroutine (on the runner's task: set, then reset)."""
        log = running.log = AttemptLog(self.limits, self.secrets)
        token = CURRENT.set(log)
        try:
            outcome = await function(*args)
        finally:
            CURRENT.reset(token)
        return attach(log, outcome)

    def register_child(self, running: Running) -> None:
        """A log for an attempt a pool child runs (the records it forwards name it)."""
        running.log = AttemptLog(self.limits, self.secrets)
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
