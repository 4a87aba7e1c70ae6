"""The event loop async jobs run on: started on a thread of its own when the first async
job comes, watched for blocking calls (LoopLagMonitor), stopped with the executor."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from .watchdogs import LoopLagMonitor


class LoopThread:
    """One event loop on a daemon thread, made on first use (:meth:`get`).

    ``lag_threshold``: seconds of silence that log a blocking-call warning (None: off),
    naming what ``describe`` says is on the loop.
    """

    def __init__(
        self,
        *,
        lag_threshold: float | None,
        describe: Callable[[asyncio.Task[object] | None], str],
    ) -> None:
        self.lag_threshold = lag_threshold
        self.describe = describe
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self._lag_monitor: LoopLagMonitor | None = None
        self._lock = threading.Lock()

    def on_it(self) -> bool:
        """Whether the calling thread is the loop's."""
        return self.thread is not None and threading.get_ident() == self.thread.ident

    def get(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self.loop is None:
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
                self.loop, self.thread = loop, thread
                if self.lag_threshold:
                    self._lag_monitor = LoopLagMonitor(
                        loop, thread, self.lag_threshold, self.describe
                    )
                    self._lag_monitor.start()
            return self.loop

    def cancel_all(self) -> None:
        """Cancel every task on the loop (if it runs)."""
        loop = self.loop
        if loop is None:
            return

        def cancel_all() -> None:
            for task in asyncio.all_tasks(loop):
                task.cancel()

        loop.call_soon_threadsafe(cancel_all)

    def stop(self, before: Callable[[asyncio.AbstractEventLoop], None]) -> None:
        """Stop the monitor and the loop: ``before(loop)`` runs on it first (it stops the
        loop once what it ends has ended); waits up to 5 s for the thread."""
        if self._lag_monitor is not None:
            self._lag_monitor.stop()
        loop, thread = self.loop, self.thread
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(before, loop)
            thread.join(5.0)
