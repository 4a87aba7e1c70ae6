"""A worker's registration: its row in ``<schema>.workers``, the lease owner of its claims.

The heartbeat refreshes it; when the row was removed (the worker was presumed dead
after ``lease_timeout`` without a heartbeat, e.g. a long stall), the first of the
heartbeat and the rescuer to notice registers again, once. Jobs the old registration
held may have been rescued: their late outcomes are fenced out.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

if TYPE_CHECKING:
    from .._store.ports import WorkerPort
    from .pool import PoolSize

logger = logging.getLogger("pgtasks.worker")


class Registration:
    """The current registration id of one worker (None until :meth:`register`)."""

    def __init__(
        self,
        store: WorkerPort,
        *,
        name: str,
        hostname: str,
        pid: int,
        queues: Sequence[str] | None,
        concurrency: int,
        lease_timeout: float,
        task_names: Callable[[], Sequence[str]] = list,
        pool: PoolSize | None = None,
    ) -> None:
        self.queries = store
        #: The pool's size at runtime (pool.py): bounds stored, requests read per beat.
        self.pool = pool
        #: The tasks the worker knows when it registers (its row shows them).
        self.task_names = task_names
        self.name = name
        self.hostname = hostname
        self.pid = pid
        self.queues = list(queues) if queues is not None else None
        self.concurrency = concurrency
        self.lease_timeout = lease_timeout
        #: The lease owner of new claims.
        self.worker_id: int | None = None
        #: Set once the worker is stopping: keep beating, but never register again.
        self.stopping = threading.Event()
        #: Set once the worker stopped: heartbeats end.
        self.ended = threading.Event()
        self._id_lock = threading.Lock()
        self._reregister_lock = threading.Lock()

    def register(self, conn: psycopg.Connection[Any]) -> int:
        # The row and its pool bounds commit together, before the id is published: whoever
        # sees the worker (this process, `pgtasks workers`) may resize it within its bounds.
        with conn.transaction():
            worker_id = self.queries.register_worker(
                conn,
                hostname=self.hostname,
                pid=self.pid,
                queues=self.queues,
                concurrency=self.concurrency,
                task_names=self.task_names(),
            )
            if self.pool is not None:
                self.pool.registered(self.queries, conn, worker_id)
        with self._id_lock:
            self.worker_id = worker_id
        return worker_id

    def heartbeat(self, conn: psycopg.Connection[Any]) -> None:
        """Refresh the heartbeat; register again if the row is gone (once, race-free)."""
        worker_id = self.worker_id
        if worker_id is None or self.ended.is_set():
            return
        if self.queries.heartbeat_worker(conn, worker_id):
            if self.pool is not None:
                self.pool.poll(self.queries, conn, worker_id)
            return
        with self._reregister_lock:
            # The heartbeat and the rescuer both get here: only the first re-registers.
            if self.worker_id != worker_id or self.stopping.is_set():
                return
            new_id = self.register(conn)
        logger.warning(
            "worker %s: registration %d was removed (presumed dead after %g s without a"
            " heartbeat); re-registered as %d. Jobs it held may have been rescued; their late"
            " outcomes will be discarded.",
            self.name,
            worker_id,
            self.lease_timeout,
            new_id,
            extra={"worker_id": new_id},
        )
