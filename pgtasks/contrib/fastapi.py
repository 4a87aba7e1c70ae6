"""FastAPI integration: the ASGI lifespan of :mod:`pgtasks.contrib.asgi`.

``FastAPI(lifespan=lifespan(app, worker={"concurrency": 10}))`` opens the App's pools at
startup (checking the schema), runs a worker beside the application when asked to, and
stops and closes both at shutdown. FastAPI itself is not imported here.
"""

from __future__ import annotations

from .asgi import lifespan, run_app

__all__ = ["lifespan", "run_app"]
