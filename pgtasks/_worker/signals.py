"""A worker process's stop signals (StopSignals) and the watchdog of its stop.

A signal handler runs on the main thread between two of its bytecodes, wherever that
thread is: inside ``Event.set()`` holding the event's lock, inside ``Thread.start()``
holding the interpreter's thread-list lock, inside a log call. A handler that takes any
of those locks again waits for itself forever. So the handlers here only write the
signal's number to a pipe (``os.write``: no lock, no log, no allocation of a thread);
a thread of their own, ``pgtasks-stop-signals``, reads it, stops the worker and logs.

The stop is remembered: SIGTERM or SIGINT that comes before the worker exists (the app
still importing) or while it starts is applied to it as soon as it is attached
(:meth:`StopSignals.attach`), and ``Worker.run`` then starts every service, claims
nothing and stops them all again. A second signal, whenever it comes, releases the
running jobs at once.

The watchdog: once stopping, if the process has not ended by the stop's deadline (the
shutdown timeout after the first signal, at once after a second) plus STOP_MARGIN, the
same thread says what the stop still waits for (the worker's stopping step, where its
loop thread is, the services still running, the jobs it holds), releases those jobs
(fenced, on a connection of its own, as the second signal does), deregisters and ends
the process with status 1. Nothing it does waits for a lock the stuck thread may hold:
its messages go to the log through a helper thread, and straight to stderr when the log
does not take them within a second.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol

logger = logging.getLogger("pgtasks.worker")

#: The promise (guarantee 14): a stopping process has exited within this many seconds of
#: its stop deadline, whatever the database does.
EXIT_BOUND = 10.0
#: Seconds past the stop's deadline after which a process still stopping is ended: more
#: than the steps after the deadline take together (shutdown.AFTER_DEADLINE_BOUND, 6.5 s),
#: with room left for the watchdog's own release within EXIT_BOUND.
STOP_MARGIN = 7.5
#: Exit status of a process ended by the watchdog.
STUCK_EXIT_STATUS = 1
#: Longest the watchdog waits for the log to take a message before writing it to stderr.
LOG_BOUND = 0.5
#: What the watchdog keeps in hand before EXIT_BOUND (its last message, the exit itself).
EXIT_SPARE = 0.5
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stoppable(Protocol):
    """What the stop signals drive: a Worker, or the beats of a ``pgtasks beat`` process
    (BeatStop)."""

    name: str

    def stop(self, timeout: float | None = None, *, wait: bool = True) -> None: ...

    def stop_status(self) -> str:
        """What the stop still waits for, in words (any thread; never blocks)."""
        ...

    def release_held(self, seconds: float) -> str:
        """Release the jobs the worker holds (fenced) and deregister, on a connection of
        its own, within ``seconds``; what was done, in words."""
        ...


class StopSignals:
    """SIGTERM/SIGINT of one worker process: remembered, applied on a thread of their own.

    ``install()`` (main thread) before anything else starts; ``attach(worker)`` once the
    worker exists; ``restore()`` puts the previous handlers back (``pgtasks worker``
    never does: it ends its process with them in place).
    """

    def __init__(
        self,
        name: str,
        *,
        shutdown_timeout: float,
        margin: float = STOP_MARGIN,
        exit_process: Callable[[int], None] = os._exit,
        kind: str = "worker",
    ) -> None:
        self.name = name
        #: What is stopped, in the messages: "worker" (running jobs, released by a
        #: second signal) or "beat" (no jobs).
        self.kind = kind
        self.shutdown_timeout = shutdown_timeout
        self.margin = margin
        self._exit_process = exit_process
        self._lock = threading.Lock()
        self._target: Stoppable | None = None
        self._received = 0
        #: time.monotonic() by which the stop should be over (None: not stopping).
        self._deadline: float | None = None
        self._previous: dict[int, Any] = {}
        self._read_fd = self._write_fd = -1
        self._pid = 0
        self._thread: threading.Thread | None = None

    @property
    def received(self) -> int:
        """Stop signals received so far."""
        return self._received

    # -- the main thread --
    def install(self) -> None:
        """Handle SIGTERM and SIGINT from now on (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            raise ValueError("stop signals can only be handled in the main thread")
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)
        self._pid = os.getpid()
        # Signals before the thread runs wait in the pipe.
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        self._thread = threading.Thread(
            target=self._serve, name="pgtasks-stop-signals", daemon=True
        )
        self._thread.start()

    def restore(self) -> None:
        """Put the previous handlers back (main thread); end the thread."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}
        if self._write_fd >= 0:
            # Only now: a handler still installed would write to a closed (or reused) fd.
            with contextlib.suppress(OSError):
                os.write(self._write_fd, b"\0")
            if self._thread is not None:
                self._thread.join(2.0)
            for fd in (self._read_fd, self._write_fd):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._read_fd = self._write_fd = -1

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # Nothing but a write: see the module's docstring. A full pipe (thousands of
        # signals unread) loses only repeats of a stop already requested. A child forked
        # before it set its own handlers must not stop its parent through the pipe.
        if os.getpid() == self._pid:
            with contextlib.suppress(OSError):
                os.write(self._write_fd, bytes((signum,)))

    # -- any thread --
    def attach(self, target: Stoppable) -> None:
        """Drive ``target`` from now on: a stop requested before is applied to it now."""
        with self._lock:
            self._target = target
            received, deadline = self._received, self._deadline
        if received:
            remaining = max(0.0, (deadline or time.monotonic()) - time.monotonic())
            target.stop(remaining, wait=False)

    # -- the thread of the signals --
    def _serve(self) -> None:
        while True:
            with self._lock:
                due = None if self._deadline is None else self._deadline + self.margin
            timeout = None if due is None else max(0.0, due - time.monotonic())
            try:
                readable, _, _ = select.select([self._read_fd], [], [], timeout)
            except (OSError, ValueError):
                return  # closed
            if not readable:
                self._stuck()
                return
            try:
                data = os.read(self._read_fd, 256)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum == 0:
                    return  # restore()
                if signum in SIGNALS:
                    self._received_signal(signal.Signals(signum))

    def _received_signal(self, signum: signal.Signals) -> None:
        now = time.monotonic()
        with self._lock:
            self._received += 1
            first = self._received == 1
            grace = self.shutdown_timeout if first else 0.0
            if self._deadline is None or now + grace < self._deadline:
                self._deadline = now + grace
            target = self._target
        # Stop first: logging may be what the process is stuck in.
        if target is not None:
            if first:
                target.stop(wait=False)
            else:
                target.stop(timeout=0, wait=False)
        kind = self.kind
        starting = "" if target is not None else f" (the {kind} stops as soon as it has started)"
        if first and kind == "worker":
            self._say(
                logging.INFO,
                f"worker {self.name}: {signum.name} received, stopping (running jobs get"
                f" {self.shutdown_timeout:g} s; send it again to release them at once){starting}",
            )
        elif first:
            message = f"{kind} {self.name}: {signum.name} received, stopping{starting}"
            self._say(logging.INFO, message)
        elif self._received == 2:
            then = "releasing running jobs now" if kind == "worker" else "stopping now"
            self._say(logging.INFO, f"{kind} {self.name}: second {signum.name}, {then}{starting}")

    def _stuck(self) -> None:
        """The stop did not end by its deadline plus the margin: say what it waits for,
        release what the worker holds, end the process."""
        with self._lock:
            target, deadline = self._target, self._deadline
        kind = self.kind
        waiting = target.stop_status() if target is not None else f"the {kind} to be made"
        self._say(
            logging.ERROR,
            f"{kind} {self.name} did not stop within {self.margin:g} s of its stop deadline"
            f" (shutdown timeout {self.shutdown_timeout:g} s); still waiting for: {waiting}."
            f" {'Releasing its jobs and exiting' if kind == 'worker' else 'Exiting'} with"
            f" status {STUCK_EXIT_STATUS}",
        )
        if target is not None:
            # Whatever is left before the promised exit, less the last message's bound.
            end = (deadline or time.monotonic()) + EXIT_BOUND - EXIT_SPARE - LOG_BOUND
            seconds = max(0.2, end - time.monotonic())
            self._say(logging.WARNING, f"{kind} {self.name}: {target.release_held(seconds)}")
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        self._exit_process(STUCK_EXIT_STATUS)

    def _say(self, level: int, message: str) -> None:
        """Log ``message``; when the log does not take it within LOG_BOUND seconds (a
        handler's lock held by the stuck thread), write it to stderr instead."""
        thread = threading.Thread(
            target=logger.log, args=(level, message), name="pgtasks-stop-log", daemon=True
        )
        thread.start()
        thread.join(LOG_BOUND)
        if thread.is_alive():
            with contextlib.suppress(OSError):
                os.write(2, f"{logging.getLevelName(level)} pgtasks.worker: {message}\n".encode())


def worker_name() -> str:
    """The name a worker of this process has: ``<host>:<pid>`` (Worker.name)."""
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"
