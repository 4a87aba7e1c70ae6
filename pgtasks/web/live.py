"""Live updates of the overview: one LISTEN connection and one renderer per dashboard,
however many browsers watch.

A listener thread LISTENs on the schema's enqueue channel (``store.channel``: queue
names) and its done channel (``store.done_channel``: finished ids). A notification marks
the overview stale; the broadcaster renders it at most once per ``debounce`` seconds and
hands the HTML to every subscriber (each keeps only the newest). Every ``poll`` seconds
it renders anyway: workers' heartbeats notify nothing, and a notification can be missed
while the listener reconnects. Nothing runs while no browser is subscribed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg
from starlette.concurrency import run_in_threadpool

if TYPE_CHECKING:
    from .._app.app import App

logger = logging.getLogger("pgtasks.web")

#: Shortest gap between two renders caused by notifications (seconds).
DEBOUNCE = 0.5
#: Longest gap between two renders (seconds): the polling fallback.
POLL = 5.0
#: What a subscriber's queue receives when its stream is to end.
END = ""


class LiveHub:
    """Render the overview when the database says something changed; fan it out."""

    def __init__(
        self,
        app: App,
        render: Callable[[], str],
        *,
        debounce: float = DEBOUNCE,
        poll: float = POLL,
    ) -> None:
        self.app = app
        self.render = render
        self.debounce = debounce
        self.poll = poll
        self._subscribers: set[asyncio.Queue[str]] = set()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stale: asyncio.Event | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._flagged = False
        #: Notifications received (for tests and the benchmark).
        self.notifications = 0
        #: Renders done.
        self.renders = 0

    # -- subscribers --
    def subscribe(self) -> asyncio.Queue[str]:
        """A queue that receives the overview's HTML after each render (newest only)."""
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._loop is not loop:
            self._start(loop)
        queue: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
        self._subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[str]) -> None:
        self._subscribers.discard(queue)
        if not self._subscribers:
            self._shutdown()

    def close_streams(self) -> None:
        """End every open event stream (the server is stopping). Safe from any thread and
        from a signal handler: the work is handed to the event loop.
        """
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing is open
                loop.call_soon_threadsafe(self._end_streams)

    def _end_streams(self) -> None:
        for queue in list(self._subscribers):
            with contextlib.suppress(asyncio.QueueEmpty):
                queue.get_nowait()
            queue.put_nowait(END)

    # -- lifetime --
    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._shutdown()
        self._loop = loop
        self._stale = asyncio.Event()
        self._flagged = False
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._listen, args=(self._stop,), name="pgtasks-web-listen", daemon=True
        )
        self._thread.start()
        self._task = loop.create_task(self._broadcast(self._stale))

    def _shutdown(self) -> None:
        self._stop.set()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = None
        self._thread = None

    def _mark_stale(self) -> None:
        # A burst of notifications (thousands of finished jobs a second) wakes the loop
        # once: the flag stays set until the broadcaster takes it.
        if self._flagged:
            return
        self._flagged = True
        loop, stale = self._loop, self._stale
        if loop is not None and stale is not None:
            with contextlib.suppress(RuntimeError):  # the loop may be closed by now
                loop.call_soon_threadsafe(stale.set)

    # -- the listener thread --
    def _listen(self, stop: threading.Event) -> None:
        store = self.app.store
        failures = 0
        while not stop.is_set():
            try:
                with psycopg.connect(
                    self.app.dsn,
                    autocommit=True,
                    connect_timeout=max(1, round(self.app.connect_timeout)),
                    application_name="pgtasks web",
                ) as conn:
                    store.pin_isolation(conn)
                    store.listen(conn, store.channel, store.done_channel)
                    failures = 0
                    # Whatever happened while not listening: render once now.
                    self._mark_stale()
                    while not stop.is_set():
                        for _notify in conn.notifies(timeout=0.5):
                            self.notifications += 1
                            self._mark_stale()
            except psycopg.Error as error:
                failures += 1
                if failures == 1:
                    logger.warning("dashboard listener lost its connection, retrying: %s", error)
                stop.wait(min(5.0, 0.2 * 2**failures))

    # -- the broadcaster task --
    async def _broadcast(self, stale: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stale.wait(), self.poll)
            stale.clear()
            self._flagged = False
            started = loop.time()
            try:
                html = await run_in_threadpool(self.render)
            except Exception as error:  # a database outage: keep going, try again later
                logger.warning("dashboard overview could not be rendered: %s", error)
                await asyncio.sleep(self.poll)
                continue
            self.renders += 1
            for queue in list(self._subscribers):
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()  # drop an unsent older render
                queue.put_nowait(html)
            # Debounce: notifications in the meantime coalesce into the next render.
            await asyncio.sleep(max(0.0, self.debounce - (loop.time() - started)))

    def stats(self) -> dict[str, Any]:
        return {
            "subscribers": len(self._subscribers),
            "notifications": self.notifications,
            "renders": self.renders,
        }
