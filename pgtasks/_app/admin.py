"""Operator reads and writes shared by ``pgtasks stats|jobs|workers`` and ``pgtasks web``:
stats and the dashboard overview, job pages, retry (one job, every failed job, or what a
filter selects), cancellation of what a filter selects, and deletion of a finished job.

Each function runs its statements through ``app._run`` (a pooled connection, broken
connections retried) and returns values from ``pgtasks._operations``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.errors import UniqueViolation

from .._errors import DatabaseError, JobNotFoundError, UniqueKeyTakenError
from .._jobs import JobRow
from .._limits import LimitState, describe_limit, limit_states
from .._operations import (
    RETRYABLE,
    JobFilter,
    Overview,
    QueueStats,
    Stats,
    WorkerInfo,
    minutes_of_last_hour,
    overview_queues,
)
from .._queues import QueueState, queue_states

if TYPE_CHECKING:
    from .app import App

#: The unique index of keys unique while active (migration 0010).
ACTIVE_KEY_INDEX = "jobs_unique_active_idx"
#: Rows per UPDATE of a bulk retry or cancel (each batch commits on its own).
BATCH_SIZE = 1000
#: Below this many rows (pg_class.reltuples) the overview counts finished jobs exactly;
#: above, it estimates them from ANALYZE's statistics (see migration 0006).
EXACT_COUNT_LIMIT = 50_000
#: Removed workers the overview and workers page list (seconds since removal).
WORKER_HISTORY = 3600.0

RETRY_RULE = (
    "A retried job becomes pending and due now. Its attempts count is kept (its history"
    " stays true) and max_attempts is extended so that at least one more attempt is"
    " allowed: max_attempts = max(max_attempts, attempts + 1). last_error is kept until"
    " the next attempt ends; result, lock, finished_at and the cancellation flag are cleared."
)


def _missing(job_id: int) -> JobNotFoundError:
    return JobNotFoundError(f"job {job_id} does not exist (it may have been pruned)")


# -- reads ----------------------------------------------------------------------------------------
def read_workers(
    app: App, conn: psycopg.Connection[Any], *, since: float
) -> tuple[datetime, list[WorkerInfo]]:
    """The database's now and the workers ``pgtasks workers --since`` lists."""
    rows = app.store.list_workers(conn, since=since)
    now = rows[0]["now"] if rows else app.store.get_database_time(conn)
    return now, [WorkerInfo.from_row(row, lease_timeout=app.lease_timeout) for row in rows]


def collect_stats(app: App, conn: psycopg.Connection[Any]) -> Stats:
    """What ``pgtasks stats`` shows (exact counts: it reads every row)."""
    queues = [QueueStats.from_row(row) for row in app.store.get_queue_stats(conn)]
    now, workers = read_workers(app, conn, since=0.0)
    return Stats(
        now=now,
        queues=queues,
        live_workers=sum(worker.state == "live" for worker in workers),
        silent_workers=sum(worker.state == "silent" for worker in workers),
        lease_timeout=app.lease_timeout,
        unknown_tasks=app.store.get_unknown_task_jobs(conn, lease_timeout=app.lease_timeout),
    )


def overview(app: App) -> Overview:
    """The dashboard's overview without reading finished rows one by one: pending and
    running through their partial indexes, finished jobs exactly on small tables and
    estimated on large ones, the last hour's throughput through jobs_finished_idx.
    """

    def read(conn: psycopg.Connection[Any]) -> Overview:
        store = app.store
        unfinished = store.get_unfinished_stats(conn)
        size = store.get_jobs_table_size(conn)
        estimated = size >= EXACT_COUNT_LIMIT
        # A large table whose statistics ANALYZE has not built yet (migration 0006 on an
        # existing table): finished counts are unknown until it has, never counted.
        finished = store.get_finished_estimates(conn) if estimated else []
        unanalyzed = estimated and not finished
        if not estimated:
            finished = store.get_finished_counts(conn)
        per_minute = store.get_finished_per_minute(conn)
        now, workers = read_workers(app, conn, since=WORKER_HISTORY)
        paused = frozenset(row["queue"] for row in store.get_paused_queues(conn))
        queues = overview_queues(unfinished, finished)
        shown = {queue.queue for queue in queues}
        # A paused queue without jobs is listed too: its resume button must be reachable.
        queues += [QueueStats(queue) for queue in paused if queue not in shown]
        queues.sort(key=lambda queue: queue.queue or "")
        return Overview(
            now=now,
            queues=queues,
            paused=paused,
            estimated=estimated,
            unanalyzed=unanalyzed,
            per_minute=minutes_of_last_hour(now, per_minute),
            workers=workers,
            lease_timeout=app.lease_timeout,
        )

    return app.database.run(read)


def queues(app: App) -> list[QueueState]:
    """What ``pgtasks queues list`` shows: every known queue (declared by a task, with
    unfinished jobs, or paused), its pending, due and running jobs, and whether it is
    paused. Counts come from indexes only (no finished row is read)."""
    declared = {task.queue for task in app.tasks.values()}

    def read(conn: psycopg.Connection[Any]) -> list[QueueState]:
        store = app.store
        limits = {
            row["name"].removeprefix("queue:"): describe_limit(row)
            for row in store.get_limits(conn)
            if row["name"].startswith("queue:")
        }
        return queue_states(
            store.get_unfinished_stats(conn), store.get_paused_queues(conn), declared, limits
        )

    return app.database.run(read)


def limits(app: App, *, top_keys: int = 10) -> list[LimitState]:
    """Every limit as ``pgtasks limits`` (and the dashboard) shows it: kind, capacity,
    rate tokens and refill, the running, pending and due jobs under it, those it holds
    back, and for per-key limits the ``top_keys`` busiest keys; then the limits jobs name
    that are not stored. Counts are read without SKIP LOCKED. A table that cannot be read
    raises DatabaseError with the reason (never a driver traceback)."""

    def read(conn: psycopg.Connection[Any]) -> list[LimitState]:
        store = app.store
        return limit_states(
            store.get_limits(conn),
            store.get_limit_usage(conn),
            store.get_limit_top_keys(conn, per_limit=top_keys),
        )

    try:
        return app.database.run(read)
    except psycopg.Error as error:
        raise DatabaseError(
            "the limits cannot be read"
            f" ({type(error).__name__}: {' '.join(str(error).split())}); `pgtasks doctor`"
            " checks the limits table, `pgtasks migrate` repairs a schema that is behind"
        ) from None


def jobs_page(
    app: App, job_filter: JobFilter, *, before: int | None, limit: int
) -> tuple[datetime, list[JobRow], bool]:
    """The database's now, up to ``limit`` jobs matching the filter older than ``before``
    (newest first), and whether more follow.
    """

    def read(conn: psycopg.Connection[Any]) -> tuple[datetime, list[JobRow], bool]:
        now, rows = app.store.list_jobs_page(conn, job_filter, before=before, limit=limit + 1)
        if now is None:
            now = app.store.get_database_time(conn)
        return now, rows[:limit], len(rows) > limit

    return app.database.run(read)


def job_detail(app: App, job_id: int) -> tuple[datetime, JobRow]:
    """The database's now and one job; JobNotFoundError when it does not exist."""

    def read(conn: psycopg.Connection[Any]) -> tuple[datetime, JobRow | None]:
        return app.store.get_database_time(conn), app.store.get_job(conn, job_id)

    now, job = app.database.run(read)
    if job is None:
        raise _missing(job_id)
    return now, job


# -- writes ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class RetryResult:
    """The outcome of retrying one job: ``retried`` False when it was not failed or
    cancelled (``previous_status`` says what it was).
    """

    id: int
    retried: bool
    previous_status: str
    attempts: int | None
    max_attempts: int | None

    @property
    def refusal(self) -> str:
        return (
            f"job {self.id} is {self.previous_status}: only {' or '.join(RETRYABLE)}"
            " jobs can be retried"
        )


def retry_job(app: App, job_id: int) -> RetryResult:
    """Retry one failed or cancelled job (RETRY_RULE) and wake its queue's workers;
    JobNotFoundError when it does not exist.
    """

    def retry(conn: psycopg.Connection[Any]) -> Any:
        row = app.store.retry_job(conn, job_id)
        if row is not None and row["retried"]:
            app.store.notify_queue(conn, row["queue"])
        return row

    try:
        row = app.database.run(retry)
    except UniqueViolation as error:
        raise _key_taken(app, job_id, error) from None
    if row is None:
        raise _missing(job_id)
    return RetryResult(
        id=job_id,
        retried=bool(row["retried"]),
        previous_status=row["previous_status"],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
    )


def _key_taken(app: App, job_id: int, error: UniqueViolation) -> UniqueKeyTakenError:
    """Why a retry of job ``job_id`` was refused: the job it would duplicate."""
    if error.diag.constraint_name != ACTIVE_KEY_INDEX:
        raise error
    holder = app.database.run(lambda conn: app.store.get_active_key_holder(conn, job_id))
    if holder is None:  # the holder finished meanwhile: the retry may be tried again
        return UniqueKeyTakenError(
            f"job {job_id} was not retried: another job held its unique key (unique while"
            " active) a moment ago; try again"
        )
    return UniqueKeyTakenError(
        f"job {job_id} was not retried: its unique key {holder['unique_key']!r} (unique while"
        f" active) is held by {holder['status']} job {holder['id']}; wait for that job to"
        f" finish, or cancel it (pgtasks jobs cancel {holder['id']}), then retry"
    )


def _in_batches(
    app: App, batch: Callable[[psycopg.Connection[Any]], list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Run ``batch`` (one committed UPDATE of up to BATCH_SIZE rows) until it comes up short;
    every queue a batch put jobs back into is notified.
    """

    def run(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        while True:
            done = batch(conn)
            rows += done
            if len(done) < BATCH_SIZE:
                break
        for queue in sorted({row["queue"] for row in rows if "queue" in row}):
            app.store.notify_queue(conn, queue)
        return rows

    return app.database.run(run)


def _batch_key_taken(error: UniqueViolation) -> UniqueKeyTakenError:
    """A bulk retry skips jobs whose key an active job holds; two picked jobs of one key
    would both become active: that batch is refused (earlier batches stay retried).
    """
    if error.diag.constraint_name != ACTIVE_KEY_INDEX:
        raise error
    return UniqueKeyTakenError(
        "retry stopped: several of the jobs share a unique key (unique while active) and"
        " only one of them can be pending or running; retry one of them by id"
        " (pgtasks jobs retry ID)"
    )


def retry_failed_jobs(app: App, task_name: str | None = None) -> list[int]:
    """Retry every failed job (of one task, or any): the ids retried, sorted."""
    try:
        rows = _in_batches(
            app,
            lambda conn: app.store.retry_failed_jobs(conn, task_name=task_name, limit=BATCH_SIZE),
        )
    except UniqueViolation as error:
        raise _batch_key_taken(error) from None
    return sorted(row["id"] for row in rows)


def retry_matching(app: App, job_filter: JobFilter) -> list[int]:
    """Retry every failed or cancelled job the filter selects: the ids retried, sorted."""
    try:
        rows = _in_batches(
            app,
            lambda conn: app.store.retry_filtered_jobs(conn, job_filter, limit=BATCH_SIZE),
        )
    except UniqueViolation as error:
        raise _batch_key_taken(error) from None
    return sorted(row["id"] for row in rows)


def cancel_matching(app: App, job_filter: JobFilter) -> dict[str, list[int]]:
    """Cancel every pending job and ask every running job to stop that the filter
    selects: ``{"cancelled": ids, "requested": ids}``.
    """
    rows = _in_batches(
        app,
        lambda conn: app.store.cancel_filtered_jobs(conn, job_filter, limit=BATCH_SIZE),
    )
    return {
        "cancelled": sorted(row["id"] for row in rows if row["status"] == "cancelled"),
        "requested": sorted(row["id"] for row in rows if row["status"] == "running"),
    }


def delete_finished_job(app: App, job_id: int) -> tuple[bool, str]:
    """Delete one done, failed or cancelled job: (deleted, its status). A pending or
    running job is kept (False); JobNotFoundError when it does not exist.
    """
    row = app.database.run(lambda conn: app.store.delete_finished_job(conn, job_id))
    if row is None:
        raise _missing(job_id)
    return bool(row["deleted"]), str(row["status"])
