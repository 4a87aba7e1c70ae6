"""What the dashboard reads, on a small pool of its own, and the values its pages show.

Every read runs on :class:`DashboardDatabase`: at most ``pool_size`` connections of the
dashboard's own (a page load never takes a connection the application needs for its
``delay()``), each with a statement timeout, so one slow filter cannot hold a connection
for long. Reads select only what a page shows and cut long values on the server: a jobs
list never loads a job's result or kwargs, nor more than the head of its args and the
last line of its error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from .._app.admin import WORKER_HISTORY
from .._app.schedules import ScheduleStatus, schedule_statuses
from .._counters import every_counter
from .._durable_text import parked_by_queue
from .._job_filter import JobFilter
from .._jobs import JobStatus
from .._operations import (
    STATUSES,
    QueueStats,
    WorkerInfo,
    overview_queues,
    total_stats,
)
from .._progress import PROGRESS_KEY, Progress
from .._store.database import Database
from .._store.ports import DashboardPort
from .._workflows_text import WorkflowSummary

if TYPE_CHECKING:
    from .._app.app import App

T = TypeVar("T")

#: Below this many rows (pg_class.reltuples) finished jobs are counted exactly; above,
#: estimated from ANALYZE's statistics.
EXACT_COUNT_LIMIT = 50_000
#: Finished jobs the overview's charts read at most (a heap fetch each): past it, only the
#: newest minutes of the hour are drawn, and the charts say so.
CHART_ROW_CAP = 200_000
#: Args whose stored (possibly compressed) size is at most this are shown in the jobs
#: list, cut to LIST_ARGS_CHARS characters; larger ones are not rendered at all.
LIST_ARGS_BYTES = 4096
LIST_ARGS_CHARS = 120
#: The last line of a job's last error in the jobs list, in characters.
LIST_ERROR_CHARS = 200
#: The counts of a bulk action's button stop at this many jobs.
BULK_COUNT_CAP = 100_000
#: Workflows the overview lists (the newest).
OVERVIEW_WORKFLOWS = 5
#: Jobs of each workflow the dashboard's lists (overview, workflows) count at most (plus
#: one): a workflow with more shows "more than" this many steps and no progress, and a
#: list costs the same whatever the size of its workflows (its page counts them all).
WORKFLOW_STEPS_CAP = 10_000
#: Jobs a page of a filter no index serves reads at most (newest first): a page of a
#: rare value costs what a page of a common one does, and says where it stopped.
SCAN_ROWS = 10_000


@dataclasses.dataclass
class _Connections:
    """The pools a dashboard and its primary-reading view share."""

    database: Database | None = None
    source: Database | None = None


class DashboardDatabase:
    """The dashboard's own connections to the App's database: a small pool (opened on
    first use, so building a dashboard connects nowhere), a statement timeout on every
    connection, READ COMMITTED whatever the database's default. It follows the App to
    another database (``App.use_database``).

    Reads go to the App's replica when it has one (``replica_dsn``; the primary while
    the replica cannot be reached); :meth:`on_primary` gives a view that reads the
    primary (a page right after an action must show the change it made). Through a
    transaction pooler, which refuses startup options, each read is a transaction that
    sets its own statement timeout and isolation.
    """

    def __init__(
        self,
        app: App,
        *,
        pool_size: int,
        statement_timeout: float,
        replica: bool = True,
        connections: _Connections | None = None,
    ) -> None:
        self.app = app
        self.pool_size = pool_size
        self.statement_timeout = statement_timeout
        #: Reads may go to the replica.
        self.replica = replica
        self._connections = connections if connections is not None else _Connections()

    def on_primary(self) -> DashboardDatabase:
        """The same connections, reading the primary."""
        return DashboardDatabase(
            self.app,
            pool_size=self.pool_size,
            statement_timeout=self.statement_timeout,
            replica=False,
            connections=self._connections,
        )

    @property
    def database(self) -> Database:
        shared = self._connections
        source = self.app.database
        if shared.database is None or shared.source is not source:
            if shared.database is not None:
                shared.database.close()
            timeout_ms = max(1, round(self.statement_timeout * 1000))
            shared.database = Database(
                source.settings,
                dataclasses.replace(source.pools, min_size=1, max_size=self.pool_size),
                queries=source.queries,
                connection_kwargs={
                    "application_name": "pgtasks web",
                    "options": f"-c statement_timeout={timeout_ms}"
                    r" -c default_transaction_isolation=read\ committed",
                },
                name=f"pgtasks-web-{source.queries.schema}",
            )
            shared.source = source
        return shared.database

    @property
    def queries(self) -> DashboardPort:
        """The statements the dashboard runs (its catalog seen through its port)."""
        return self.database.queries

    def run(self, operation: Callable[[psycopg.Connection[Any]], T]) -> T:
        database = self.database
        if database.pooled:
            operation = self._limited(operation)
        return database.read(operation) if self.replica else database.run(operation)

    def _limited(
        self, operation: Callable[[psycopg.Connection[Any]], T]
    ) -> Callable[[psycopg.Connection[Any]], T]:
        """``operation`` in a transaction of its own that sets what the startup options
        would have (a pooled connection gets none)."""
        store, timeout = self.queries, self.statement_timeout

        def limited(conn: psycopg.Connection[Any]) -> T:
            with conn.transaction():
                store.begin_read_committed(conn)
                store.limit_statement_time(conn, timeout)
                return operation(conn)

        return limited

    def close(self) -> None:
        shared = self._connections
        if shared.database is not None:
            shared.database.close()
        shared.database = shared.source = None


# -- the overview ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class FinishedMinutes:
    """Jobs finished in each minute of the last hour, per queue: ``counts[queue]`` holds
    one ``(done, failed, cancelled)`` per minute of ``minutes`` (oldest first, the current
    minute last). ``read_from``: None when the whole hour was read; else the first minute
    read in full (CHART_ROW_CAP reached: the minutes before it are not drawn)."""

    now: datetime
    minutes: list[datetime]
    counts: dict[str, list[tuple[int, int, int]]]
    read_from: datetime | None = None

    @property
    def totals(self) -> list[int]:
        return [
            sum(sum(series[index]) for series in self.counts.values())
            for index in range(len(self.minutes))
        ]

    @classmethod
    def from_rows(cls, now: datetime, rows: list[dict[str, Any]], cap: int) -> FinishedMinutes:
        current = now.replace(second=0, microsecond=0)
        minutes = [current - timedelta(minutes=back) for back in range(59, -1, -1)]
        position = {minute: index for index, minute in enumerate(minutes)}
        slot = {"done": 0, "failed": 1, "cancelled": 2}
        counts: dict[str, list[list[int]]] = {}
        read = 0
        earliest: datetime | None = None
        for row in rows:
            read += row["jobs"]
            index = position.get(row["minute"])
            if index is None or row["status"] not in slot:
                continue
            series = counts.setdefault(row["queue"], [[0, 0, 0] for _ in minutes])
            series[index][slot[row["status"]]] += row["jobs"]
            if earliest is None or row["minute"] < earliest:
                earliest = row["minute"]
        # The cap was reached: the earliest minute read may be partial.
        read_from = earliest + timedelta(minutes=1) if read >= cap and earliest else None
        return cls(
            now=now,
            minutes=minutes,
            counts={
                queue: [(done, failed, cancelled) for done, failed, cancelled in series]
                for queue, series in sorted(counts.items())
            },
            read_from=read_from,
        )


@dataclasses.dataclass(frozen=True)
class StatusCounts:
    """Jobs per queue and status. Waiting, pending, due and running are exact (partial
    indexes); done, failed and cancelled are estimates when ``estimated`` (a large table:
    ANALYZE's statistics), unknown when ``unanalyzed`` (no statistics yet)."""

    queues: list[QueueStats]
    estimated: bool
    unanalyzed: bool
    paused: frozenset[str] = frozenset()

    @property
    def total(self) -> QueueStats:
        return total_stats(self.queues)

    def of(self, queue: str | None) -> QueueStats:
        """The counts of one queue (zeros for a queue without jobs), or of all (None)."""
        if queue is None:
            return self.total
        for stats in self.queues:
            if stats.queue == queue:
                return stats
        return QueueStats(queue)


@dataclasses.dataclass(frozen=True)
class Overview:
    """What the dashboard's overview shows."""

    now: datetime
    counts: StatusCounts
    finished: FinishedMinutes
    workers: list[WorkerInfo]
    lease_timeout: float
    #: How often the guarantees were exercised (as Stats.counters; every name present).
    counters: dict[str, int] = dataclasses.field(default_factory=dict)
    #: The newest workflows (OVERVIEW_WORKFLOWS of them).
    workflows: list[WorkflowSummary] = dataclasses.field(default_factory=list)
    #: Jobs parked by a durable call, ``{queue: {"sleeping": n, "waiting": n, …}}``.
    parked: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)

    @property
    def queues(self) -> list[QueueStats]:
        return self.counts.queues

    @property
    def paused(self) -> frozenset[str]:
        return self.counts.paused

    @property
    def total(self) -> QueueStats:
        return self.counts.total

    @property
    def live_workers(self) -> int:
        return sum(worker.state == "live" for worker in self.workers)


def read_status_counts(
    store: DashboardPort, conn: psycopg.Connection[Any], *, paused: bool = True
) -> StatusCounts:
    """Per queue counts without reading finished rows one by one: waiting, pending and
    running through their partial indexes, finished jobs exactly on small tables and
    estimated on large ones. ``paused``: also list paused queues (even without jobs)."""
    unfinished = store.get_unfinished_stats(conn)
    estimated = store.get_jobs_table_size(conn) >= EXACT_COUNT_LIMIT
    # A large table whose declared statistics ANALYZE has not built yet: finished counts
    # are unknown until it has, never counted.
    finished = store.get_finished_estimates(conn) if estimated else []
    unanalyzed = estimated and not finished
    if not estimated:
        finished = store.get_finished_counts(conn)
    queues = overview_queues(unfinished, finished)
    paused_queues: frozenset[str] = frozenset()
    if paused:
        paused_queues = frozenset(row["queue"] for row in store.get_paused_queues(conn))
        shown = {queue.queue for queue in queues}
        # A paused queue without jobs is listed too: its resume button must be reachable.
        queues += [QueueStats(queue) for queue in paused_queues if queue not in shown]
        queues.sort(key=lambda queue: queue.queue or "")
    return StatusCounts(queues, estimated, unanalyzed, paused_queues)


def read_finished_minutes(store: DashboardPort, conn: psycopg.Connection[Any]) -> FinishedMinutes:
    rows = store.get_finished_minutes(conn, cap=CHART_ROW_CAP)
    return FinishedMinutes.from_rows(store.get_database_time(conn), rows, CHART_ROW_CAP)


def overview(
    app: App, database: DashboardDatabase, *, finished: FinishedMinutes | None = None
) -> Overview:
    """The overview: counts, workers and (unless ``finished`` is given, a recent copy)
    the last hour's finished jobs per minute and queue."""

    def read(conn: psycopg.Connection[Any]) -> Overview:
        store = database.queries
        counts = read_status_counts(store, conn)
        chart = finished if finished is not None else read_finished_minutes(store, conn)
        now, workers = app.admin.read_workers(conn, since=WORKER_HISTORY)
        return Overview(
            now=now,
            counts=counts,
            finished=chart,
            workers=workers,
            lease_timeout=app.lease_timeout,
            counters=every_counter(store.get_counters(conn)),
            workflows=[
                WorkflowSummary.from_row(row)
                for row in store.list_workflows(
                    conn, limit=OVERVIEW_WORKFLOWS, steps_cap=WORKFLOW_STEPS_CAP
                )
            ],
            parked=parked_by_queue(store.count_parked_jobs(conn)),  # through jobs_parked_idx
        )

    return database.run(read)


# -- the jobs list --------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class JobListRow:
    """One job as the jobs list shows it (never its result, kwargs or whole error)."""

    id: int
    task_name: str
    queue: str
    priority: int
    status: JobStatus
    attempts: int
    max_attempts: int
    run_at: datetime
    locked_at: datetime | None
    created_at: datetime
    finished_at: datetime | None
    workflow_id: int | None
    workflow_step: str | None
    #: The head of the args' JSON text (None: too large to render, see ``args_size``).
    args_head: str | None
    #: The args' stored size in bytes (compressed when large).
    args_size: int
    #: The last line of the last error, cut.
    error_line: str | None
    progress: Progress | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> JobListRow:
        progress = row.get("progress")
        return cls(
            id=row["id"],
            task_name=row["task_name"],
            queue=row["queue"],
            priority=row["priority"],
            status=JobStatus(row["status"]),
            attempts=row["attempts"],
            max_attempts=row["max_attempts"],
            run_at=row["run_at"],
            locked_at=row["locked_at"],
            created_at=row["created_at"],
            finished_at=row["finished_at"],
            workflow_id=row["workflow_id"],
            workflow_step=row.get("workflow_step"),
            args_head=row["args_head"],
            args_size=int(row["args_size"] or 0),
            error_line=row["error_line"] or None,
            progress=Progress.from_meta({PROGRESS_KEY: progress}) if progress else None,
        )

    @property
    def args_text(self) -> str:
        """The args as the list shows them: their head (``…`` when cut), or their size."""
        if self.args_head is None:
            return f"[… {format_bytes(self.args_size)}]"
        if len(self.args_head) >= LIST_ARGS_CHARS:
            return self.args_head[: LIST_ARGS_CHARS - 1] + "…"
        return self.args_head

    def runtime(self, now: datetime) -> float | None:
        """Seconds its current attempt has run (running), or its last attempt ran (finished)."""
        if self.locked_at is None:
            return None
        if self.status is JobStatus.RUNNING:
            return max(0.0, (now - self.locked_at).total_seconds())
        if self.status.is_finished and self.finished_at is not None:
            return max(0.0, (self.finished_at - self.locked_at).total_seconds())
        return None


def format_bytes(size: float) -> str:
    for unit in ("bytes", "kB", "MB"):
        if size < 1024 or unit == "MB":
            return f"{size:,.0f} {unit}" if unit == "bytes" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{size:,.1f} MB"  # pragma: no cover - the loop returns


@dataclasses.dataclass(frozen=True)
class JobsPage:
    now: datetime
    jobs: list[JobListRow]
    more: bool
    counts: StatusCounts | None
    #: A filter no index serves read only SCAN_ROWS jobs and the page is not full: the
    #: lowest id read (older jobs were not searched; ``?before=`` it goes on), else None.
    searched_to: int | None = None


def jobs_page(
    database: DashboardDatabase,
    job_filter: JobFilter,
    *,
    before: int | None,
    limit: int,
    counts: bool = True,
) -> JobsPage:
    """Up to ``limit`` jobs matching the filter older than ``before`` (newest first),
    whether more follow, and (``counts``) the jobs per queue and status for the tabs."""

    def read(conn: psycopg.Connection[Any]) -> JobsPage:
        store = database.queries
        cuts = {
            "args_bytes": LIST_ARGS_BYTES,
            "args_chars": LIST_ARGS_CHARS,
            "error_chars": LIST_ERROR_CHARS,
        }
        searched_to = None
        if job_filter.scans:
            rows = store.list_jobs_scan(
                conn, job_filter, before=before, limit=limit + 1, scan=SCAN_ROWS, **cuts
            )
            if len(rows) <= limit:
                floor, scanned = store.get_scan_floor(conn, before=before, scan=SCAN_ROWS)
                if scanned >= SCAN_ROWS and floor is not None:
                    searched_to = floor
        else:
            rows = store.list_jobs_page(conn, job_filter, before=before, limit=limit + 1, **cuts)
        now = rows[0]["now"] if rows else store.get_database_time(conn)
        jobs = [JobListRow.from_row(row) for row in rows[:limit]]
        tabs = read_status_counts(store, conn, paused=False) if counts else None
        return JobsPage(
            now=now, jobs=jobs, more=len(rows) > limit, counts=tabs, searched_to=searched_to
        )

    return database.run(read)


@dataclasses.dataclass(frozen=True)
class BulkCounts:
    """Jobs a bulk action of a filter would touch: counted up to ``cap`` (a scan), or
    read from the status counts (``estimated``: finished jobs of a large table)."""

    retryable: int
    cancellable: int
    cap: int | None = None
    estimated: bool = False

    def as_json(self) -> dict[str, Any]:
        capped = self.cap is not None
        return {
            "retryable": self.retryable,
            "cancellable": self.cancellable,
            "retryable_capped": capped and self.retryable >= (self.cap or 0),
            "cancellable_capped": capped and self.cancellable >= (self.cap or 0),
            "estimated": self.estimated,
        }


#: Statuses a bulk retry acts on, and a bulk cancel.
RETRIED = ("failed", "cancelled")
CANCELLED = ("waiting", "pending", "running")


def bulk_counts(database: DashboardDatabase, job_filter: JobFilter) -> BulkCounts:
    """How many jobs each bulk action of the filter would touch. A filter of a queue
    and/or a status is answered from the status counts (indexes and statistics, as the
    overview); any other is counted, stopping at BULK_COUNT_CAP (a scan of the table,
    under the statement timeout)."""

    def read(conn: psycopg.Connection[Any]) -> BulkCounts:
        store = database.queries
        if job_filter.counted_by_status:
            counts = read_status_counts(store, conn, paused=False)
            if not counts.unanalyzed:
                stats = counts.of(job_filter.queue)
                chosen = (job_filter.status,) if job_filter.status else STATUSES

                def total(statuses: tuple[str, ...]) -> int:
                    return sum(int(getattr(stats, s)) for s in statuses if s in chosen)

                return BulkCounts(total(RETRIED), total(CANCELLED), estimated=counts.estimated)
        row = store.count_filtered_jobs(conn, job_filter, cap=BULK_COUNT_CAP)
        return BulkCounts(int(row["retryable"]), int(row["cancellable"]), BULK_COUNT_CAP)

    return database.run(read)


# -- workers and schedules ------------------------------------------------------------------------
def schedules(app: App, database: DashboardDatabase) -> tuple[datetime, list[ScheduleStatus]]:
    return schedule_statuses(app, run=database.run)
