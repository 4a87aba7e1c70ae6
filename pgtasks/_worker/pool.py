"""PoolSize: a worker's thread and event-loop slots resized at runtime (`pgtasks control
pool_grow|pool_shrink`, the dashboard's workers page), within the bounds it started with
(``min_concurrency``, ``max_concurrency``; default 1 and its concurrency).

The request is a column of the worker's row; the worker reads it at each heartbeat (one
primary-key read), applies it (claims use the new capacity from their next round trip;
on a shrink, the running jobs finish and no new one starts until fewer run) and writes
the size it runs back, which is the acknowledgment the CLI waits for. The process pool
keeps its size: a worker without thread or event-loop slots stores no bounds, and a
resize of it is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

if TYPE_CHECKING:
    from .._execution.executor import Executor
    from .._store.ports import WorkerPort
    from .settings import WorkerSettings

logger = logging.getLogger("pgtasks.worker")


class PoolSize:
    """The size of one worker's pool of local slots, and the requests to change it."""

    def __init__(self, settings: WorkerSettings, executor: Callable[[], Executor | None]) -> None:
        self.low, self.high = settings.pool_bounds
        self._executor = executor

    def registered(self, store: WorkerPort, conn: psycopg.Connection[Any], worker_id: int) -> None:
        """Store the bounds with the worker's row (none for a worker without local slots)."""
        executor = self._executor()
        if executor is not None and executor.uses_local:
            store.set_worker_pool_bounds(conn, worker_id, self.low, self.high)

    def poll(self, store: WorkerPort, conn: psycopg.Connection[Any], worker_id: int) -> None:
        """Apply a size asked for since the last heartbeat (heartbeat thread)."""
        wanted = store.get_worker_pool_wanted(conn, worker_id)
        executor = self._executor()
        if wanted is None or executor is None or not executor.uses_local:
            return
        size = min(max(wanted, self.low), self.high)  # the request was checked; rows may lie
        before = executor.concurrency
        executor.concurrency = size
        threads = executor._threads
        threads.size = max(threads.size, size)
        store.applied_worker_pool(conn, worker_id, size)
        if size != before:
            logger.info(
                "worker %d: pool resized from %d to %d slots (bounds %d to %d)",
                worker_id,
                before,
                size,
                self.low,
                self.high,
            )
