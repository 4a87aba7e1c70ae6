"""JobThreads: the worker's job threads (a lean pool without a Future per call)."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any


class JobThreads:
    """``size`` daemon threads running submitted calls in order.

    Leaner than a ThreadPoolExecutor on the hot path: no Future, lock or condition per
    call, one C-level queue. Slot accounting stays with the Executor, so a call never
    waits here for long. Daemon threads: a task that outlives its job (past a timeout, or
    after shutdown released it) cannot keep the process alive.
    """

    def __init__(self, size: int, *, name: str) -> None:
        self.size = size
        self.name = name
        self._calls: queue.SimpleQueue[tuple[Callable[..., None], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._threads: list[threading.Thread] = []
        self._busy: set[threading.Thread] = set()
        self._lock = threading.Lock()

    def start_all(self) -> None:
        """Start every thread now (a worker's start) rather than one per call of the first
        burst of jobs: starting a thread waits for it to run, and 50 of them took the
        loop thread 5-15 ms while its first claimed jobs were waiting to start."""
        while len(self._threads) < self.size:
            self._grow()

    def submit(self, function: Callable[..., None], *arguments: Any) -> None:
        if len(self._threads) < self.size:
            self._grow()
        self._calls.put((function, arguments))

    def _grow(self) -> None:
        with self._lock:
            if len(self._threads) < self.size:
                thread = threading.Thread(
                    target=self._run, name=f"{self.name}_{len(self._threads)}", daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def _run(self) -> None:
        me = threading.current_thread()
        busy = self._busy
        while True:
            call = self._calls.get()
            if call is None:
                return
            function, arguments = call
            busy.add(me)
            try:
                function(*arguments)
            finally:
                busy.discard(me)

    def shutdown(self, idle_join: float = 1.0) -> None:
        """Let every thread end after its current call (queued calls are dropped).

        Idle threads are joined (up to ``idle_join`` seconds in all), so a stopped
        worker leaves none behind; a thread still inside a call (a task that outlived
        its released job) is not waited for.
        """
        while True:
            try:
                self._calls.get_nowait()
            except queue.Empty:
                break
        for _ in self._threads:
            self._calls.put(None)
        deadline = time.monotonic() + idle_join
        for thread in self._threads:
            if thread in self._busy or thread is threading.current_thread():
                continue
            thread.join(max(0.0, deadline - time.monotonic()))
