"""Running a blocking ``run()`` from an asyncio program (Worker.arun)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable


async def run_on_a_thread(run: Callable[[], None], stop: Callable[..., None], *, name: str) -> None:
    """Call ``run`` on a thread of its own while the awaiting task waits.

    Cancelling the awaiting task calls ``stop(wait=False)``, waits until ``run`` has
    returned, then re-raises ``CancelledError``; a second cancellation meanwhile calls
    ``stop(0.0, wait=False)``. An error of ``run`` is raised here.
    """
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()

    def report(error: BaseException | None) -> None:
        if ended.done():
            return
        if error is None:
            ended.set_result(None)
        else:
            ended.set_exception(error)

    def target() -> None:
        error: BaseException | None = None
        try:
            run()
        except BaseException as failure:
            error = failure
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(report, error)

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    try:
        await asyncio.shield(ended)
    except asyncio.CancelledError:
        stop(wait=False)
        while not ended.done():
            try:
                await asyncio.shield(ended)
            except asyncio.CancelledError:
                stop(0.0, wait=False)  # cancelled again: release running jobs now
            except BaseException:
                break  # run() failed while stopping: the cancellation is what we report
        thread.join()  # it has returned from run(): it only ends
        raise
    thread.join()
