"""Pruning finished jobs: the batched pass (``prune``) and the worker's Pruner service.

A pass deletes finished jobs past their retention in batches of ``batch_size`` rows,
each batch one short autocommit statement that locks only the rows it deletes (rows
held elsewhere are skipped, never waited for). Pending and running rows are never
read: the batches scan ``jobs_finished_idx``, whose predicate is the finished statuses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

from .._operations import PruneResult
from .connection import Connect
from .services import Service

if TYPE_CHECKING:
    from .._store.store import Store
    from .settings import WorkerSettings

logger = logging.getLogger("pgtasks.pruner")

#: Rows per DELETE statement.
DEFAULT_BATCH_SIZE = 1000
#: Seconds a removed worker stays in ``pgtasks workers`` history.
WORKER_HISTORY_RETENTION = 86400.0


def prune(
    store: Store,
    conn: psycopg.Connection[Any],
    *,
    done_after: float | None,
    failed_after: float | None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    history_after: float | None = WORKER_HISTORY_RETENTION,
    stopping: Callable[[], bool] = lambda: False,
) -> PruneResult:
    """Delete done jobs finished over ``done_after`` seconds ago, and failed and cancelled
    ones over ``failed_after`` seconds ago (None: keep them), ``batch_size`` at a time.

    ``conn`` must be in autocommit mode, so that each batch commits on its own.
    ``stopping`` is checked between batches.
    """
    if not conn.autocommit:
        raise ValueError("prune() needs an autocommit connection (each batch commits alone)")
    result = PruneResult()
    classes = (("done",), done_after), (("failed", "cancelled"), failed_after)
    for statuses, older_than in classes:
        if older_than is None:
            continue
        while not stopping():
            deleted = store.prune_jobs(
                conn, statuses=statuses, older_than=older_than, limit=batch_size
            )
            result.batches += 1
            for status, count in deleted.items():
                result.add(status, count)
            if sum(deleted.values()) < batch_size:
                break
    retentions = [seconds for seconds in (done_after, failed_after) if seconds is not None]
    if retentions and not stopping():
        # Workflows whose jobs are all pruned (migration 0011), and the incidents of the
        # workflow machinery kept as long as failed jobs (migration workflow_progress).
        store.prune_workflows(conn, older_than=min(retentions))
        store.prune_workflow_incidents(conn, older_than=max(retentions))
    if history_after is not None and not stopping():
        result.worker_history = store.prune_worker_history(conn, older_than=history_after)
    return result


class Pruner(Service):
    """Prunes finished jobs every ``interval`` seconds with the App's retention options.

    One worker of a schema prunes at a time: a pass starts only when it gets the
    schema's pruner advisory lock (a session lock on this service's own connection,
    released after the pass, or by the server if the connection dies).

    ``use_lock=False`` (a pooled ``dsn`` without a session connection, where a session
    lock would stay behind on a server connection of the pooler): every worker prunes;
    each batch skips the rows another one holds, so passes that overlap delete each job
    once.
    """

    name = "pruner"

    def __init__(
        self,
        owner: str,
        connect: Connect,
        settings: WorkerSettings,
        *,
        store: Store,
        batch_size: int = DEFAULT_BATCH_SIZE,
        use_lock: bool = True,
    ) -> None:
        super().__init__(owner, connect, settings.prune_interval)
        self.use_lock = use_lock
        self.store = store
        #: Retention in seconds of done, and of failed and cancelled jobs (None: kept).
        self.done_after = settings.prune_done_after
        self.failed_after = settings.prune_failed_after
        self.batch_size = batch_size
        #: The result of the last pass this worker ran (None: none yet, or lock busy).
        self.last_result: PruneResult | None = None

    def run_once(self, conn: psycopg.Connection[Any]) -> None:
        # The counters' rows (one per count added) folded into one per name, whatever
        # the retention: two workers folding at once lose or double nothing.
        self.store.fold_counters(conn)
        self.prune(conn)

    def prune(self, conn: psycopg.Connection[Any]) -> PruneResult | None:
        """One pass; None when retention is off or another worker holds the lock."""
        if self.done_after is None and self.failed_after is None:
            return None
        store = self.store
        if not self.use_lock:
            return self._finish(self._pass(conn))
        if not store.lock_pruner(conn):
            logger.debug("pruner of worker %s: another worker is pruning", self.owner)
            return None
        try:
            result = self._pass(conn)
        finally:
            if not conn.closed and not conn.broken:
                store.unlock_pruner(conn)
        return self._finish(result)

    def _pass(self, conn: psycopg.Connection[Any]) -> PruneResult:
        return prune(
            self.store,
            conn,
            done_after=self.done_after,
            failed_after=self.failed_after,
            batch_size=self.batch_size,
            stopping=self.stopping.is_set,
        )

    def _finish(self, result: PruneResult) -> PruneResult:
        self.last_result = result
        if result.total or result.worker_history:
            logger.info(
                "pruned %d finished job(s) (%s) and %d removed worker(s)",
                result.total,
                ", ".join(f"{status} {count}" for status, count in result.deleted.items()),
                result.worker_history,
            )
        return result
