"""Watchdogs of the in-process executors: soft time limits for threads, event-loop lag.

**ThreadSoftLimits** raises SoftTimeLimitExceeded inside a job's thread once its
``soft_timeout`` has passed, with ``PyThreadState_SetAsyncExc``. CPython delivers such an
exception only when that thread next executes Python bytecode: pure-Python code gets it
at once, but a thread blocked in C (``time.sleep``, ``Event.wait``, a socket read, a
long computation in an extension holding the GIL) gets it only after that call returns,
and it may even surface a few lines later. Each attempt gets at most one; a pending one
is withdrawn when the task returns first, so it never escapes into the thread pool.

**LoopLagMonitor** notices a blocked event loop: a callback on the loop records a beat
every ``interval`` seconds, and a thread checks the beats. When none came for
``threshold`` seconds, the loop is stuck in one callback right now; the monitor logs a
warning naming the async task running at that moment and the line it is blocked at.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import heapq
import logging
import sys
import threading
import time
from collections.abc import Callable

from .._errors import SoftTimeLimitExceeded

logger = logging.getLogger("pgtasks.worker")


def _set_async_exc(thread_id: int, exception: type[BaseException] | None) -> int:
    """Schedule ``exception`` in a thread (None: withdraw a pending one)."""
    target = None if exception is None else ctypes.py_object(exception)
    # No argtypes on the shared function object: None goes through as NULL.
    return int(ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), target))


@dataclasses.dataclass(eq=False)
class SoftLimit:
    """One attempt's soft limit in one thread."""

    thread_id: int
    seconds: float
    deadline: float
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    active: bool = True
    fired: bool = False


class ThreadSoftLimits:
    """One timer thread for the soft limits of every job thread (started on first use)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, SoftLimit]] = []
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def begin(self, seconds: float) -> SoftLimit:
        """Arm a limit for the calling thread; pair with :meth:`end`."""
        limit = SoftLimit(threading.get_ident(), seconds, time.monotonic() + seconds)
        with self._condition:
            heapq.heappush(self._heap, (limit.deadline, id(limit), limit))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="pgtasks-soft-timeouts", daemon=True
                )
                self._thread.start()
            self._condition.notify()
        return limit

    @staticmethod
    def end(limit: SoftLimit) -> None:
        """The task returned: disarm, and withdraw the exception if it is still pending.

        Call it inside the ``try`` whose ``except`` handles the task's errors: the
        exception may be delivered here, before it could be withdrawn.
        """
        with limit.lock:
            limit.active = False
            if limit.fired:
                _set_async_exc(limit.thread_id, None)

    def stop(self) -> None:
        with self._condition:
            self._stopped = True
            self._condition.notify()
        thread = self._thread
        if thread is not None:
            thread.join(2.0)

    def _run(self) -> None:
        while True:
            due: list[SoftLimit] = []
            with self._condition:
                while not self._stopped:
                    now = time.monotonic()
                    while self._heap and (self._heap[0][0] <= now or not self._heap[0][2].active):
                        due.append(heapq.heappop(self._heap)[2])
                    if due:
                        break
                    timeout = self._heap[0][0] - now if self._heap else None
                    self._condition.wait(timeout)
                if self._stopped:
                    return
            for limit in due:
                self._fire(limit)

    @staticmethod
    def _fire(limit: SoftLimit) -> None:
        with limit.lock:
            if limit.active and not limit.fired:
                limit.fired = True
                _set_async_exc(limit.thread_id, SoftTimeLimitExceeded)  # made without arguments


class LoopLagMonitor:
    """Warns when the event loop has not run its beat for ``threshold`` seconds."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        loop_thread: threading.Thread,
        threshold: float,
        describe: Callable[[asyncio.Task[object] | None], str],
    ) -> None:
        self.loop = loop
        self.loop_thread = loop_thread
        self.threshold = threshold
        self.interval = min(0.1, threshold / 4)
        self.describe = describe
        self._last_beat = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="pgtasks-loop-lag", daemon=True)
        #: Blocking episodes seen (read by tests).
        self.episodes = 0

    def start(self) -> None:
        self.loop.call_soon_threadsafe(self._beat)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(2.0)

    def _beat(self) -> None:
        self._last_beat = time.monotonic()
        if not self._stop.is_set():
            self.loop.call_later(self.interval, self._beat)

    def _watch(self) -> None:
        blocked_since: float | None = None
        while not self._stop.wait(self.interval):
            last_beat = self._last_beat
            silence = time.monotonic() - last_beat
            if silence <= self.threshold:
                if blocked_since is not None:
                    logger.info(
                        "event loop responsive again after being blocked for about %.2f s",
                        last_beat - blocked_since,
                    )
                    blocked_since = None
                continue
            if blocked_since is not None:
                continue  # one warning per episode
            blocked_since = last_beat
            self.episodes += 1
            task = asyncio.current_task(self.loop) if not self.loop.is_closed() else None
            logger.warning(
                "event loop blocked for %.2f s (loop_lag_threshold %g s) while running %s:"
                " a blocking call inside a coroutine? Every async task on this worker waits"
                " meanwhile; use await, or run the call with asyncio.to_thread()%s",
                silence,
                self.threshold,
                self.describe(task),
                self._where(),
            )

    def _where(self) -> str:
        """`` (at file:line in function)`` for the loop thread's innermost Python frame."""
        frame = sys._current_frames().get(self.loop_thread.ident or 0)
        if frame is None:
            return ""
        code = frame.f_code
        return f" (blocked at {code.co_filename}:{frame.f_lineno} in {code.co_name})"
