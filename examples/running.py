"""What the examples that run their own worker share: ``with running(app) as worker``
migrates the example's schema, runs a ``pgtasks.Worker`` in a thread of this process,
and on the way out stops it, waits for its thread and closes the app."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pgtasks import App, Worker


@contextmanager
def running(app: App, *, concurrency: int = 2) -> Iterator[Worker]:
    app.migrate()
    worker = Worker(app, concurrency=concurrency, poll_interval=0.2)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join()
        app.close()
