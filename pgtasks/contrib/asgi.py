"""An ASGI lifespan for pgtasks: the App's pools (and, optionally, a worker) live as long
as the application.

``lifespan(app)`` returns what Starlette's and FastAPI's ``lifespan=`` take: a callable of
the ASGI application returning an async context manager. At startup it opens the App's
async connection pool and checks the schema (an unmigrated schema fails the startup with
the command that fixes it), applies the migrations first when ``migrate=True``, and starts
a :class:`~pgtasks.Worker` on a thread of its own when ``worker=`` asks for one (``True``,
a mapping of ``Worker`` options, or a ``Worker``); the startup completes once the worker
has registered. At shutdown the worker stops gracefully (running jobs get its
``shutdown_timeout``; the rest go back to pending) and the pools close.

No dependency beyond pgtasks: any framework that runs ASGI lifespan events can use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError
from .._worker.events import WorkerEvents
from .._worker.worker import Worker

if TYPE_CHECKING:
    from .._app.app import App

logger = logging.getLogger("pgtasks.asgi")

__all__ = ["lifespan", "run_app"]

WorkerSpec = bool | Mapping[str, Any] | Worker | None


class _Started(WorkerEvents):
    """Resolves a future on the program's loop once the worker has registered."""

    def __init__(self, loop: asyncio.AbstractEventLoop, started: asyncio.Future[None]) -> None:
        self.loop = loop
        self.started = started

    def worker_started(self, worker: Worker) -> None:
        def resolve() -> None:
            if not self.started.done():
                self.started.set_result(None)

        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            self.loop.call_soon_threadsafe(resolve)


def _build_worker(app: App, worker: WorkerSpec) -> Worker | None:
    if worker is None or worker is False:
        return None
    if worker is True:
        return Worker(app)
    if isinstance(worker, Worker):
        if worker.app is not app:
            raise ConfigurationError("lifespan(worker=...): the Worker belongs to another App")
        return worker
    if isinstance(worker, Mapping):
        try:
            return Worker(app, **dict(worker))
        except TypeError as error:
            raise ConfigurationError(f"lifespan(worker=...): {error}") from None
    raise ConfigurationError(
        "lifespan(worker=...) takes True, a mapping of Worker options or a Worker,"
        f" not {type(worker).__name__}"
    )


@asynccontextmanager
async def run_app(
    app: App, *, worker: WorkerSpec = None, migrate: bool = False
) -> AsyncIterator[Worker | None]:
    """Open ``app``'s pools (and run a worker) for the duration of the ``async with``.

    Yields the running :class:`Worker`, or None when ``worker`` asks for none. The body of
    the ``async with`` is the application's lifetime; see the module docstring.
    """
    running = _build_worker(app, worker)
    if running is not None and running.worker_id is not None:
        raise ConfigurationError("lifespan(worker=...): this Worker is running already")
    try:
        if migrate:
            await asyncio.to_thread(app.migrate)
        await app.database.get_apool()
        async with app.aconnection():  # checks the schema: fail the startup, not a request
            pass
        task: asyncio.Task[None] | None = None
        if running is not None:
            loop = asyncio.get_running_loop()
            started: asyncio.Future[None] = loop.create_future()
            running.observers.append(_Started(loop, started))
            task = asyncio.create_task(running.arun(), name=f"pgtasks worker {running.name}")
            # Whichever comes first: registered, or run() failed (it raises from arun()).
            await asyncio.wait({started, task}, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                started.cancel()
                task.result()  # raises run()'s error
                raise ConfigurationError("the pgtasks worker ended during the startup")
            task.add_done_callback(_report_early_end)
        try:
            yield running
        finally:
            if task is not None and not task.done():
                task.remove_done_callback(_report_early_end)
                task.cancel()  # Worker.arun(): a graceful stop
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    finally:
        await app.aclose()


def _report_early_end(task: asyncio.Task[None]) -> None:
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        logger.error("the pgtasks worker stopped: %s", error, exc_info=error)
    else:
        logger.error("the pgtasks worker stopped before the application")


def lifespan(
    app: App, *, worker: WorkerSpec = None, migrate: bool = False
) -> Callable[[Any], AbstractAsyncContextManager[None]]:
    """An ASGI ``lifespan=`` for Starlette, FastAPI and other ASGI frameworks.

    ``FastAPI(lifespan=lifespan(app, worker={"concurrency": 10}))``. Compose it with a
    lifespan of your own by entering ``run_app(app, ...)`` inside yours.
    """

    @asynccontextmanager
    async def manage(asgi_app: Any) -> AsyncIterator[None]:
        async with run_app(app, worker=worker, migrate=migrate):
            yield

    return manage
