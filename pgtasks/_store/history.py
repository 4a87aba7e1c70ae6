"""HistoryQueries: statements for jobs_history:
its day partitions created ahead and dropped once expired, rows past retention deleted
where no whole day can be dropped, and finished jobs left in jobs by older versions moved
over in batches (``sql/history.sql``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import psycopg

from .base import QueriesBase

logger = logging.getLogger("pgtasks.pruner")

#: Day partitions are created from today (UTC) to this many days ahead.
DAYS_AHEAD = 2
#: How long a partition's catalog change (attach, detach) waits for its lock.
PARTITION_LOCK_TIMEOUT = "1s"


class HistoryQueries(QueriesBase):
    """jobs_history's partitions and the batched deletes and moves of the pruner."""

    def prepare_history_days(self, conn: psycopg.Connection[Any]) -> list[str]:
        """Create the coming days' partitions on ``conn`` (autocommit), each in a
        transaction of its own under ``PARTITION_LOCK_TIMEOUT`` that holds the schema's
        migration lock (a migrator's schema changes and partition changes never overlap);
        their names. A busy table, a migration under way, or another session creating the
        same day at once, leaves it to the next call."""
        created: list[str] = []
        for _ in range(2 * (DAYS_AHEAD + 1)):
            try:
                with conn.transaction():
                    self.set_lock_timeout(conn)
                    self.lock_migrations(conn)
                    names = self.create_history_days(conn)
            except (
                psycopg.errors.LockNotAvailable,
                psycopg.errors.DeadlockDetected,
                psycopg.errors.DuplicateTable,
                psycopg.errors.DuplicateObject,
                psycopg.errors.UniqueViolation,
            ) as error:
                logger.info("jobs_history's next days are created later (%s)", type(error).__name__)
                break
            if not names:
                break
            created += names
        if created:
            logger.info("created the partitions %s of jobs_history", ", ".join(created))
        return created

    def create_history_days(
        self, conn: psycopg.Connection[Any], days: int = DAYS_AHEAD
    ) -> list[str]:
        """Create the first missing day partition from today to ``days`` ahead, in the
        caller's transaction: its name (none: none was missing)."""
        return [row["name"] for row in self._rows(conn, "create_history_days", {"days": days})]

    def get_expired_history_days(
        self, conn: psycopg.Connection[Any], *, history_class: str, older_than: float
    ) -> list[str]:
        """The day partitions of ``history_class`` ('done' or 'failed') whose whole day
        ended over ``older_than`` seconds ago, oldest first."""
        params = {"class": history_class, "older_than": older_than}
        return [
            row["partition_name"] for row in self._rows(conn, "get_expired_history_days", params)
        ]

    def forget_history_day_keys(
        self, conn: psycopg.Connection[Any], *, partition: str
    ) -> dict[str, int]:
        """Before ``partition`` is dropped: its jobs by status (those of unfinished
        workflows, which are kept, left out); the keys they held deleted."""
        rows = self._rows(conn, "forget_history_day_keys", {"partition": partition})
        return {row["status"]: int(row["jobs"]) for row in rows}

    def drop_history_day(
        self, conn: psycopg.Connection[Any], *, history_class: str, partition: str
    ) -> dict[str, int]:
        """Drop one expired day partition: its jobs by status (those of unfinished
        workflows are kept, in the class's default partition, and not counted).

        The keys of its jobs go first, in a transaction of their own; then a short one
        detaches and drops the partition under ``PARTITION_LOCK_TIMEOUT`` (a lock not
        granted raises psycopg.errors.LockNotAvailable: the next pass tries again).
        """
        with conn.transaction():
            counted = self.forget_history_day_keys(conn, partition=partition)
        with conn.transaction():
            self.set_lock_timeout(conn)
            self.lock_migrations(conn)
            row = self._rows(
                conn, "drop_history_day", {"class": history_class, "partition": partition}
            )[0]
        logger.debug("dropped %s (%d job(s) of unfinished workflows kept)", partition, row["kept"])
        return counted

    def prune_history_defaults(
        self,
        conn: psycopg.Connection[Any],
        *,
        statuses: Sequence[str],
        older_than: float,
        limit: int,
    ) -> dict[str, int]:
        """Delete one batch of expired jobs from the default partitions only."""
        params = {"statuses": list(statuses), "older_than": older_than, "limit": limit}
        rows = self._rows(conn, "prune_history_defaults", params)
        return {row["status"]: row["deleted"] for row in rows}

    def archive_finished_jobs(self, conn: psycopg.Connection[Any], *, limit: int) -> int:
        """Move one batch of finished jobs still in jobs into jobs_history: how many."""
        return int(self._rows(conn, "archive_finished_jobs", {"limit": limit})[0]["archived"])

    def set_lock_timeout(
        self, conn: psycopg.Connection[Any], timeout: str = PARTITION_LOCK_TIMEOUT
    ) -> None:
        """Lock waits of the transaction in progress end after ``timeout``."""
        self._rows(conn, "set_lock_timeout", {"timeout": timeout})

    def analyze_history(self, conn: psycopg.Connection[Any]) -> None:
        self._rows(conn, "analyze_history", None)
