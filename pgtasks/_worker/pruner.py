"""Pruning finished jobs: the pass (``prune``) and the worker's Pruner service.

Finished jobs are in jobs_history, partitioned by class and day (migration
jobs_history): a pass drops the days past retention (DROP TABLE: no row deleted, no dead
tuple), and deletes in batches of ``batch_size`` rows only what no whole day holds, each
batch one short autocommit statement that locks only the rows it deletes (rows held
elsewhere are skipped, never waited for). The jobs table itself is never read.
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
    from .._store.queries import Queries
    from .settings import WorkerSettings

logger = logging.getLogger("pgtasks.pruner")

#: Rows per DELETE statement.
DEFAULT_BATCH_SIZE = 1000
#: Seconds in a day: a retention under it is kept exact by deleting rows.
DAY = 86400.0
#: Seconds a removed worker stays in ``pgtasks workers`` history.
WORKER_HISTORY_RETENTION = 86400.0


def prune(
    store: Queries,
    conn: psycopg.Connection[Any],
    *,
    done_after: float | None,
    failed_after: float | None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    history_after: float | None = WORKER_HISTORY_RETENTION,
    stopping: Callable[[], bool] = lambda: False,
) -> PruneResult:
    """Prune done jobs finished over ``done_after`` seconds ago, and failed and cancelled
    ones over ``failed_after`` seconds ago (None: keep them).

    Finished jobs live in jobs_history, by class and day: a day
    whose whole day is past its class's retention is dropped (one catalog change, no
    dead tuple anywhere); the rows of its unfinished workflows are kept. Rows past
    retention in a day not dropped yet are deleted ``batch_size`` at a time when the
    retention is under a day (so that it stays exact), and always from the default
    partitions (days without a partition). The coming days' partitions are created first,
    and jobs finished before the migration still in jobs move over in batches.

    ``conn`` must be in autocommit mode, so that each batch commits on its own.
    ``stopping`` is checked between batches.
    """
    if not conn.autocommit:
        raise ValueError("prune() needs an autocommit connection (each batch commits alone)")
    result = PruneResult()
    changed = bool(store.prepare_history_days(conn))
    changed = _archive(store, conn, result, batch_size, stopping) or changed
    classes = ("done", ("done",), done_after), ("failed", ("failed", "cancelled"), failed_after)
    for history_class, statuses, older_than in classes:
        if older_than is not None:
            changed = (
                _drop_days(store, conn, result, history_class, older_than, stopping) or changed
            )
            delete = store.prune_jobs if older_than < DAY else store.prune_history_defaults
            while not stopping():
                deleted = delete(conn, statuses=statuses, older_than=older_than, limit=batch_size)
                result.batches += 1
                for status, count in deleted.items():
                    result.add(status, count)
                if sum(deleted.values()) < batch_size:
                    break
    if changed and not stopping():
        store.analyze_history(conn)
    retentions = [seconds for seconds in (done_after, failed_after) if seconds is not None]
    if retentions and not stopping():
        # Workflows whose jobs are all pruned, and the incidents of the
        # workflow machinery kept as long as failed jobs.
        store.prune_workflows(conn, older_than=min(retentions))
        store.prune_workflow_incidents(conn, older_than=max(retentions))
    if history_after is not None and not stopping():
        result.worker_history = store.prune_worker_history(conn, older_than=history_after)
    return result


def _archive(
    store: Queries,
    conn: psycopg.Connection[Any],
    result: PruneResult,
    batch_size: int,
    stopping: Callable[[], bool],
) -> bool:
    """Move the finished jobs an older version left in jobs into jobs_history, in
    batches; whether any moved."""
    moved = False
    while not stopping():
        archived = store.archive_finished_jobs(conn, limit=batch_size)
        result.batches += 1
        moved = moved or archived > 0
        if archived < batch_size:
            break
    return moved


def _drop_days(
    store: Queries,
    conn: psycopg.Connection[Any],
    result: PruneResult,
    history_class: str,
    older_than: float,
    stopping: Callable[[], bool],
) -> bool:
    """Drop the day partitions of ``history_class`` past ``older_than``; whether any."""
    dropped_any = False
    for partition in store.get_expired_history_days(
        conn, history_class=history_class, older_than=older_than
    ):
        if stopping():
            break
        try:
            dropped = store.drop_history_day(conn, history_class=history_class, partition=partition)
        except psycopg.errors.LockNotAvailable:
            logger.info("pruner: %s is busy; it is dropped at the next pass", partition)
            break
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidTableDefinition):
            # Another worker's pass (a pooled dsn: no pruner lock) dropped it first.
            continue
        dropped_any = True
        result.batches += 1
        result.days_dropped += 1
        for status, count in dropped.items():
            result.add(status, count)
    return dropped_any


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
        store: Queries,
        batch_size: int = DEFAULT_BATCH_SIZE,
        use_lock: bool = True,
    ) -> None:
        super().__init__(owner, connect, settings.prune_interval)
        self.use_lock = use_lock
        self.queries = store
        #: Retention in seconds of done, and of failed and cancelled jobs (None: kept).
        self.done_after = settings.prune_done_after
        self.failed_after = settings.prune_failed_after
        self.batch_size = batch_size
        #: The result of the last pass this worker ran (None: none yet, or lock busy).
        self.last_result: PruneResult | None = None

    def run_once(self, conn: psycopg.Connection[Any]) -> None:
        # The counters' rows (one per count added) folded into one per name, whatever
        # the retention: two workers folding at once lose or double nothing.
        self.queries.fold_counters(conn)
        self.prune(conn)

    def prune(self, conn: psycopg.Connection[Any]) -> PruneResult | None:
        """One pass; None when retention is off or another worker holds the lock."""
        if self.done_after is None and self.failed_after is None:
            return None
        store = self.queries
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
            self.queries,
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
