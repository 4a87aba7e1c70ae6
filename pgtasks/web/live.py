"""Live pages: one LISTEN connection and one renderer per dashboard, however many
browsers watch, for every page that updates itself (the overview, jobs lists, job pages,
workers).

A listener thread LISTENs on the schema's channels: enqueues (``store.channel``: queue
names), finished jobs (``store.done_channel``: ids) and other changes of jobs
(``store.activity_channel``: claims, attempts that will be retried, meta and progress
writes). A notification marks every watched view stale; the broadcaster re-renders each
view with subscribers, at most once per gap (``debounce`` seconds, longer when rendering
takes more than a fifth of the time), and hands the HTML to the view's subscribers (each
keeps only the newest; an unchanged render is not sent again). Every ``poll`` seconds it
renders anyway: workers' heartbeats notify nothing, and a notification can be missed
while the listener reconnects. Nothing runs while no browser is subscribed.

Event streams end by themselves (see ``Dashboard.events``): after ``max_age`` seconds
(EventSource reconnects) and when the server stops. A server stopping on SIGTERM or
SIGINT waits for open responses to end before it runs its shutdown (uvicorn does), so
the first stream of a dashboard served from the main thread chains the process's
SIGTERM and SIGINT handlers: the signal ends every stream, then goes on to the handler
that was there (the server's).

The listener connects to the session DSN (LISTEN needs a server session of its own; a
replica cannot LISTEN); a pooled dsn without one leaves only the polling. The overview
itself is read from the replica when one is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable, Hashable
from types import FrameType
from typing import TYPE_CHECKING, Any

import psycopg
from starlette.concurrency import run_in_threadpool
from starlette.responses import StreamingResponse

if TYPE_CHECKING:
    from .._app.app import App
    from .._store.ports import DashboardPort

logger = logging.getLogger("pgtasks.web")

#: Shortest gap between two renders caused by notifications (seconds).
DEBOUNCE = 0.25
#: Longest gap between two renders (seconds): the polling fallback.
POLL = 5.0
#: Renders take at most this share of the time: a slow render widens the gap.
RENDER_SHARE = 0.2
#: How long after close_streams() new streams end at once (the server is stopping).
CLOSING = 10.0
#: What a subscriber's queue receives when its stream is to end.
END = ""
#: Signals whose arrival ends the streams (a server's shutdown signals).
SHUTDOWN_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclasses.dataclass(eq=False)
class Subscriber:
    """One event stream's mailbox: the newest HTML of its view (or END)."""

    key: Hashable
    queue: asyncio.Queue[str]
    #: Needs the next render even if unchanged (it has not received one yet).
    fresh: bool = True
    #: Told to end: later renders are not put (they would replace the END).
    ended: bool = False

    def put(self, html: str) -> None:
        if self.ended:
            return
        self.ended = html == END
        with contextlib.suppress(asyncio.QueueEmpty):
            self.queue.get_nowait()  # drop an unsent older render
        self.queue.put_nowait(html)

    async def get(self) -> str:
        return await self.queue.get()


@dataclasses.dataclass(eq=False)
class View:
    render: Callable[[], str]
    subscribers: set[Subscriber] = dataclasses.field(default_factory=set)
    last: str | None = None


class LiveHub:
    """Render watched views when the database says something changed; fan them out."""

    def __init__(self, app: App, *, debounce: float = DEBOUNCE, poll: float = POLL) -> None:
        self.app = app
        self.debounce = debounce
        self.poll = poll
        self._views: dict[Hashable, View] = {}
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stale: asyncio.Event | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._flagged = False
        self._closing_until = 0.0
        self._previous_handlers: dict[int, Any] = {}
        #: Notifications received (for tests and the benchmark).
        self.notifications = 0
        #: Views rendered.
        self.renders = 0

    # -- subscribers --
    def subscribe(self, key: Hashable, render: Callable[[], str]) -> Subscriber:
        """A mailbox receiving the HTML of view ``key`` (rendered by ``render``, in a
        thread) after each render that changed it; the first render comes soon."""
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._loop is not loop:
            self._start(loop)
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = View(render)
        subscriber = Subscriber(key, asyncio.Queue(maxsize=1))
        view.subscribers.add(subscriber)
        self._mark_stale()
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        view = self._views.get(subscriber.key)
        if view is not None:
            view.subscribers.discard(subscriber)
            if not view.subscribers:
                del self._views[subscriber.key]
        if not self._views:
            self._shutdown()

    @property
    def subscribers(self) -> int:
        return sum(len(view.subscribers) for view in self._views.values())

    @property
    def closing(self) -> bool:
        """close_streams() was called moments ago: the server is stopping."""
        return time.monotonic() < self._closing_until

    def close_streams(self) -> None:
        """End every open event stream (the server is stopping); streams opened in the
        next CLOSING seconds end at once. Safe from any thread and from a signal handler:
        the work is handed to the event loop.
        """
        self._closing_until = time.monotonic() + CLOSING
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing is open
                loop.call_soon_threadsafe(self._end_streams)

    def _end_streams(self) -> None:
        for view in list(self._views.values()):
            for subscriber in list(view.subscribers):
                subscriber.put(END)

    # -- the server's shutdown signals --
    def _chain_signals(self) -> None:
        """End the streams on SIGTERM and SIGINT, then run the handler that was there.
        Only from the main thread (where Python runs signal handlers), and only over a
        handler installed from Python (a server's, or the default)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for number in SHUTDOWN_SIGNALS:
            if number in self._previous_handlers:
                continue
            previous = signal.getsignal(number)
            if previous is None or previous == signal.SIG_IGN:
                continue
            try:
                signal.signal(number, self._on_signal)
            except (ValueError, OSError):  # pragma: no cover - not the main interpreter
                continue
            self._previous_handlers[number] = previous

    def _restore_signals(self) -> None:
        for number, previous in list(self._previous_handlers.items()):
            if signal.getsignal(number) == self._on_signal:
                with contextlib.suppress(ValueError, OSError):
                    signal.signal(number, previous)
            del self._previous_handlers[number]

    def _on_signal(self, number: int, frame: FrameType | None) -> None:
        self.close_streams()
        previous = self._previous_handlers.get(number, signal.SIG_DFL)
        if callable(previous):
            previous(number, frame)
        elif previous == signal.SIG_DFL:
            # What the signal would have done without us (SIGTERM: end the process).
            self._previous_handlers.pop(number, None)
            signal.signal(number, signal.SIG_DFL)
            signal.raise_signal(number)

    # -- lifetime --
    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._shutdown()
        self._loop = loop
        self._stale = asyncio.Event()
        self._flagged = False
        self._stop = threading.Event()
        if self.app.database.has_session:  # else (a pooled dsn alone): poll only
            self._thread = threading.Thread(
                target=self._listen, args=(self._stop,), name="pgtasks-web-listen", daemon=True
            )
            self._thread.start()
        self._task = loop.create_task(self._broadcast(self._stale))
        self._chain_signals()

    def _shutdown(self) -> None:
        self._stop.set()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = None
        self._thread = None
        self._restore_signals()

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
        store: DashboardPort = self.app.queries
        failures = 0
        while not stop.is_set():
            try:
                with self.app.database.connect(
                    session=True, application_name="pgtasks web"
                ) as conn:
                    store.listen(conn, store.channel, store.done_channel, store.activity_channel)
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
    def _render_views(self, views: dict[Hashable, View]) -> dict[Hashable, str]:
        """Render each view (in a worker thread); a view that fails is left out."""
        rendered = {}
        for key, view in views.items():
            try:
                rendered[key] = view.render()
            except Exception as error:  # a database outage, a job deleted meanwhile
                logger.warning("dashboard view %s could not be rendered: %s", key, error)
        return rendered

    async def _broadcast(self, stale: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stale.wait(), self.poll)
            stale.clear()
            self._flagged = False
            views = {key: view for key, view in self._views.items() if view.subscribers}
            if not views:
                continue
            started = loop.time()
            rendered = await run_in_threadpool(self._render_views, views)
            elapsed = loop.time() - started
            self.renders += len(rendered)
            for key, html in rendered.items():
                view = self._views.get(key)
                if view is None:
                    continue
                changed = html != view.last
                view.last = html
                for subscriber in list(view.subscribers):
                    if changed or subscriber.fresh:
                        subscriber.fresh = False
                        subscriber.put(html)
            if len(rendered) < len(views):  # some failed: no hurry to fail again
                await asyncio.sleep(self.poll)
                continue
            # Debounce: notifications in the meantime coalesce into the next render.
            gap = max(self.debounce, elapsed / RENDER_SHARE)
            await asyncio.sleep(max(0.0, gap - elapsed))

    def stats(self) -> dict[str, Any]:
        return {
            "subscribers": self.subscribers,
            "views": len(self._views),
            "notifications": self.notifications,
            "renders": self.renders,
        }


def event_stream(
    hub: LiveHub, key: Hashable, render: Callable[[], str], max_age: float
) -> StreamingResponse:
    """The event stream of one live view: its HTML after each render that changed it,
    for at most ``max_age`` seconds (the browser reconnects), ended at once when the
    server stops (``close_streams``)."""

    async def stream() -> AsyncIterator[str]:
        if hub.closing:  # the server is stopping: no new stream
            yield "retry: 1000\n\n"
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_age
        # Subscribed before anything is sent: a client that has read the first line is
        # one close_streams() ends.
        subscriber = hub.subscribe(key, render)
        try:
            # Reconnect a second after the stream ends (its age, a server restart).
            yield "retry: 1000\n\n"
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return
                try:
                    html = await asyncio.wait_for(subscriber.get(), min(15.0, remaining))
                except asyncio.TimeoutError:
                    yield ": keep-alive\n\n"  # finds a closed connection
                    continue
                if html == END:  # the server is stopping
                    return
                data = "".join(f"data: {line}\n" for line in html.splitlines())
                yield f"event: update\n{data}\n"
        finally:
            hub.unsubscribe(subscriber)

    headers = {"x-accel-buffering": "no"}
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)
