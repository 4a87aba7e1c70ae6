"""Operator reads and writes shared by ``pgtasks stats|jobs|workers`` and ``pgtasks web``:
stats, workers, queues and limits, retry (one job, every failed job, or what a filter
selects), cancellation of what a filter selects, and deletion of a finished job. (The
dashboard's own reads are in ``pgtasks.web.reads``.)

Neither a retry nor a deletion may break a workflow: a job
an unfinished workflow still needs is not deleted, and a step cancelled before it
received its input is retried with that input (or waits for it again), or refused.

Each function runs its statements through ``app.database`` (a pooled connection, broken
connections retried) and returns values from ``pgtasks._operations``. Reads that may lag
take ``replica=True`` (the dashboard, ``pgtasks stats``, ``pgtasks jobs list``): they run
on the app's replica when it has one (``Database.read``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg.errors import UniqueViolation

from .._counters import every_counter
from .._errors import (
    ConfigurationError,
    DatabaseError,
    JobNotFoundError,
    UniqueKeyTakenError,
    WorkflowProtectedError,
)
from .._job_filter import JobFilter
from .._limits import LimitState, describe_limit, limit_states
from .._operations import RETRYABLE, QueueStats, Stats, WorkerInfo
from .._payload import check_name
from .._queues import QueueState, queue_states
from .._running import (
    ARGUMENT_CHARS,
    LAST_JOBS,
    RUNNING_SHOWN,
    FinishedJob,
    RunningJob,
)
from .durable import parked_by_queue

if TYPE_CHECKING:
    from .._store.ports import AdminPort
    from .app import App


def _admin(app: App) -> AdminPort:
    """The statements the operators' functions run: ``app``'s catalog seen through its port."""
    return app.queries


T = TypeVar("T")

#: The unique index of keys unique while active.
ACTIVE_KEY_INDEX = "jobs_unique_active_idx"
#: Rows per UPDATE of a bulk retry or cancel (each batch commits on its own).
BATCH_SIZE = 1000
#: Removed workers the overview and workers page list (seconds since removal).
WORKER_HISTORY = 3600.0

RETRY_RULE = (
    "A retried job becomes pending and due now. Its attempts count is kept (its history"
    " stays true) and max_attempts is extended so that at least one more attempt is"
    " allowed: max_attempts = max(max_attempts, attempts + 1). last_error is kept until"
    " the next attempt ends; result, lock, finished_at and the cancellation flag are cleared."
    " A workflow step cancelled before it received its input gets it back: it starts with"
    " its input re-assembled from its predecessors when they are all done, waits for them"
    " again (waiting) while some are unfinished, and is refused while one of them is failed"
    " or cancelled (retry that one first)."
)


def _missing(job_id: int) -> JobNotFoundError:
    return JobNotFoundError(f"job {job_id} does not exist (it may have been pruned)")


# -- reads ----------------------------------------------------------------------------------------
def read_workers(
    app: App, conn: psycopg.Connection[Any], *, since: float
) -> tuple[datetime, list[WorkerInfo]]:
    """The database's now and the workers ``pgtasks workers --since`` lists."""
    rows = _admin(app).list_workers(conn, since=since)
    now = rows[0]["now"] if rows else _admin(app).get_database_time(conn)
    return now, [WorkerInfo.from_row(row, lease_timeout=app.lease_timeout) for row in rows]


def read_running(app: App, conn: psycopg.Connection[Any]) -> list[RunningJob]:
    """What runs where: the running jobs with their task, arguments (cut, escaped),
    attempt, runtime and host."""
    rows = _admin(app).list_running_jobs(conn, limit=RUNNING_SHOWN, chars=ARGUMENT_CHARS)
    return [RunningJob.from_row(row) for row in rows]


def read_last_jobs(
    app: App, conn: psycopg.Connection[Any], worker_ids: Sequence[int]
) -> list[FinishedJob]:
    """The last jobs each of ``worker_ids`` ran (an index probe per worker)."""
    rows = _admin(app).list_recent_worker_jobs(conn, worker_ids, per_worker=LAST_JOBS)
    return [FinishedJob.from_row(row) for row in rows]


def pause_host(app: App, hostname: str, *, pause: bool = True) -> bool:
    """Pause (or resume) every worker of ``hostname`` in every store the App serves: none
    claims from its next read of the paused queues on (at most ``paused_refresh``, a
    second, or at once on a NOTIFY); running jobs finish. Whether that changed any store."""
    check_name("hostname", hostname)
    changed = False
    for owner in app.routing.serving():
        store = _admin(owner)

        def switch(conn: psycopg.Connection[Any], store: AdminPort = store) -> bool:
            return bool(
                store.pause_host(conn, hostname) if pause else store.resume_host(conn, hostname)
            )

        changed |= owner.database.run(switch)
    return changed


def paused_hosts(app: App) -> list[str]:
    """The hosts whose workers are paused (in any store the App serves)."""
    names: set[str] = set()
    for owner in app.routing.serving():
        rows = owner.database.run(_admin(owner).get_paused_hosts)
        names.update(row["hostname"] for row in rows)
    return sorted(names)


def collect_stats(app: App, conn: psycopg.Connection[Any]) -> Stats:
    """What ``pgtasks stats`` shows (exact counts: it reads every row)."""
    queues = [QueueStats.from_row(row) for row in _admin(app).get_queue_stats(conn)]
    now, workers = read_workers(app, conn, since=0.0)
    return Stats(
        now=now,
        queues=queues,
        live_workers=sum(worker.state == "live" for worker in workers),
        silent_workers=sum(worker.state == "silent" for worker in workers),
        lease_timeout=app.lease_timeout,
        unknown_tasks=_admin(app).get_unknown_task_jobs(conn, lease_timeout=app.lease_timeout),
        counters=every_counter(_admin(app).get_counters(conn)),
        parked=parked_by_queue(_admin(app).count_parked_jobs(conn)),
        flow=_admin(app).count_keyed(conn),
    )


def queue_in_use(app: App, queue: str) -> bool:
    """Whether anything uses ``queue``: a task or schedule of the app declares it, a job
    of its store is unfinished in it, or a live worker names it in its queues. (Pausing
    a queue nothing uses is allowed; ``pgtasks queues pause`` says so, a typo perhaps.)"""
    if queue == app.default_queue or any(task.queue == queue for task in app.tasks.values()):
        return True
    if any(schedule.queue == queue for schedule in app.schedules.values()):
        return True
    owner = app.routing.for_queue(queue)

    def read(conn: psycopg.Connection[Any]) -> bool:
        if any(row["queue"] == queue for row in _admin(owner).get_unfinished_stats(conn)):
            return True
        _, workers = read_workers(owner, conn, since=0.0)
        return any(
            worker.state == "live" and worker.queues is not None and queue in worker.queues
            for worker in workers
        )

    return owner.database.run(read)


def counters(app: App) -> dict[str, int]:
    """How often the guarantees were exercised since the schema was created, every
    process (pgtasks._counters): every counter's total, by name (0 when never counted)."""
    return every_counter(app.database.run(_admin(app).get_counters))


def queues(app: App) -> list[QueueState]:
    """What ``pgtasks queues list`` shows: every known queue (declared by a task, with
    unfinished jobs, or paused), its pending, due and running jobs, and whether it is
    paused. Counts come from indexes only (no finished row is read)."""
    declared = {task.queue for task in app.tasks.values()}

    def read(conn: psycopg.Connection[Any]) -> list[QueueState]:
        store = _admin(app)
        limits = {
            row["name"].removeprefix("queue:"): describe_limit(row)
            for row in store.get_limits(conn)
            if row["name"].startswith("queue:")
        }
        return queue_states(
            store.get_unfinished_stats(conn), store.get_paused_queues(conn), declared, limits
        )

    return app.database.run(read)


def read_limits(app: App, conn: psycopg.Connection[Any], *, top_keys: int = 10) -> list[LimitState]:
    """Every limit as operators read it (``pgtasks limits``, the dashboard), on ``conn``:
    per limit its kind (queue, task or key) and target, its capacity (concurrency), its
    rate with the bucket's tokens now, burst and the seconds until the next whole token,
    the jobs running under it now, its pending and due jobs and those it holds back (due
    but no room or no token), and for a per-key limit the keys with jobs and the
    ``top_keys`` busiest (running, pending, due and held per key); then the limits jobs
    name that are not stored (``stored`` False). Counts are read without SKIP LOCKED.
    Raises the driver's error (see :func:`limits` for the one a CLI shows)."""
    store = _admin(app)
    return limit_states(
        store.get_limits(conn),
        store.get_limit_usage(conn),
        store.get_limit_top_keys(conn, per_limit=top_keys),
    )


def limits(app: App, *, top_keys: int = 10) -> list[LimitState]:
    """:func:`read_limits` on the app's connections (the replica when it has one: the
    counts may lag by its replay). A table that cannot be read raises DatabaseError with
    the reason (never a driver traceback)."""
    try:
        return app.database.read(lambda conn: read_limits(app, conn, top_keys=top_keys))
    except psycopg.Error as error:
        raise limits_unreadable(error) from None


def limits_unreadable(error: psycopg.Error) -> DatabaseError:
    """The error to show when the limits cannot be read: the reason, and what to run."""
    return DatabaseError(
        "the limits cannot be read"
        f" ({type(error).__name__}: {' '.join(str(error).split())}); `pgtasks doctor`"
        " checks the limits table, `pgtasks migrate` repairs a schema that is behind"
    )


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
    #: What the job is now: pending, or waiting (a workflow step waiting for its input).
    status: str = "pending"
    #: Durable checkpoints kept (``keep_steps=True``): replayed when it runs again.
    steps_kept: int = 0

    @property
    def refusal(self) -> str:
        return (
            f"job {self.id} is {self.previous_status}: only {' or '.join(RETRYABLE)}"
            " jobs can be retried"
        )


def retry_job(app: App, job_id: int, *, keep_steps: bool = False) -> RetryResult:
    """Retry one failed or cancelled job (RETRY_RULE) and wake its queue's workers;
    JobNotFoundError when it does not exist. A durable job runs again from the top
    without its checkpoints, or with ``keep_steps`` those before its first failed step
    (they replay; that step runs again), as a fork keeps them.
    """
    app = app.routing.for_id(job_id)  # the store that issued the id
    kept = [0]

    def retry(conn: psycopg.Connection[Any]) -> Any:
        with conn.transaction():
            row = _admin(app).retry_job(conn, job_id)
            if row is not None and row["retried"]:
                if keep_steps:
                    kept[0] = _admin(app).restore_job_steps(conn, job_id)
                _admin(app).notify_queue(conn, row["queue"])
        return row

    try:
        row = app.database.run(retry)
    except UniqueViolation as error:
        raise _key_taken(app, job_id, error) from None
    if row is None:
        raise _missing(job_id)
    if row["needs_input"] and row["previous_status"] in RETRYABLE:
        return _retry_step(app, job_id, row["previous_status"])
    return RetryResult(
        id=job_id,
        retried=bool(row["retried"]),
        previous_status=row["previous_status"],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        steps_kept=kept[0],
    )


def _retry_step(app: App, job_id: int, previous_status: str) -> RetryResult:
    """Retry a workflow step cancelled before it received its input (RETRY_RULE)."""

    def retry(conn: psycopg.Connection[Any]) -> Any:
        row = _admin(app).retry_workflow_step(conn, job_id)
        if row["outcome"] == "pending":
            _admin(app).notify_queue(conn, row["queue"])
        return row

    row = app.database.run(retry)
    if row["outcome"] == "missing":
        raise _missing(job_id)
    if row["outcome"] == "refused":
        raise WorkflowProtectedError(f"job {job_id} was not retried: {row['detail']}")
    if row["outcome"] not in ("pending", "waiting"):  # it changed meanwhile: retry normally
        return retry_job(app, job_id)
    return RetryResult(
        id=job_id,
        retried=True,
        previous_status=previous_status,
        attempts=0,
        max_attempts=None,
        status=row["outcome"],
    )


def _key_taken(app: App, job_id: int, error: UniqueViolation) -> UniqueKeyTakenError:
    """Why a retry of job ``job_id`` was refused: the job it would duplicate."""
    if error.diag.constraint_name != ACTIVE_KEY_INDEX:
        raise error
    holder = app.database.run(lambda conn: _admin(app).get_active_key_holder(conn, job_id))
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
            _admin(app).notify_queue(conn, queue)
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
            lambda conn: _admin(app).retry_failed_jobs(conn, task_name=task_name, limit=BATCH_SIZE),
        )
    except UniqueViolation as error:
        raise _batch_key_taken(error) from None
    return sorted(row["id"] for row in rows)


@dataclasses.dataclass(frozen=True)
class BulkRetry:
    """What a filtered retry did: the ids retried (pending, or waiting again for their
    workflow's earlier steps) and the workflow steps refused, with why (RETRY_RULE)."""

    retried: list[int]
    refused: dict[int, str]


def retry_matching(app: App, job_filter: JobFilter) -> list[int]:
    """Retry every failed or cancelled job the filter selects: the ids retried, sorted."""
    return retry_matching_steps(app, job_filter).retried


def retry_matching_steps(app: App, job_filter: JobFilter) -> BulkRetry:
    """Retry every failed or cancelled job the filter selects, workflow steps that never
    received their input by RETRY_RULE (in id order: a chain's steps retried together
    wait for each other)."""
    try:
        rows = _in_batches(
            app,
            lambda conn: _admin(app).retry_filtered_jobs(conn, job_filter, limit=BATCH_SIZE),
        )
    except UniqueViolation as error:
        raise _batch_key_taken(error) from None
    retried = [row["id"] for row in rows]
    refused: dict[int, str] = {}

    def steps(conn: psycopg.Connection[Any]) -> None:
        after = 0
        while True:
            batch = _admin(app).retry_filtered_steps(
                conn, job_filter, after=after, limit=BATCH_SIZE
            )
            for row in batch:
                if row["outcome"] == "refused":
                    refused[row["id"]] = row["detail"]
                elif row["outcome"] in ("pending", "waiting"):
                    retried.append(row["id"])
                    if row["outcome"] == "pending":
                        _admin(app).notify_queue(conn, row["queue"])
            if len(batch) < BATCH_SIZE:
                return
            after = batch[-1]["id"]

    app.database.run(steps)
    return BulkRetry(sorted(retried), refused)


def cancel_matching(app: App, job_filter: JobFilter) -> dict[str, list[int]]:
    """Cancel every pending job and ask every running job to stop that the filter
    selects: ``{"cancelled": ids, "requested": ids}``.
    """
    rows = _in_batches(
        app,
        lambda conn: _admin(app).cancel_filtered_jobs(conn, job_filter, limit=BATCH_SIZE),
    )
    return {
        "cancelled": sorted(row["id"] for row in rows if row["status"] == "cancelled"),
        "requested": sorted(row["id"] for row in rows if row["status"] == "running"),
    }


def delete_finished_job(app: App, job_id: int) -> tuple[bool, str]:
    """Delete one done, failed or cancelled job: (deleted, its status). A pending or
    running job is kept (False); JobNotFoundError when it does not exist;
    WorkflowProtectedError for a job of a workflow that has not finished (its later steps
    read this job's result, its handle returns it).
    """
    app = app.routing.for_id(job_id)  # the store that issued the id
    row = app.database.run(lambda conn: _admin(app).delete_finished_job(conn, job_id))
    if row is None:
        raise _missing(job_id)
    if row["workflow_unfinished"] and row["status"] in ("done", "failed", "cancelled"):
        workflow = row["workflow_id"]
        raise WorkflowProtectedError(
            f"job {job_id} was not deleted: it is step {row['workflow_step']} of workflow"
            f" {workflow}, which has not finished (its later steps read this job's result)."
            f" Delete it once the workflow has finished (pgtasks workflows show {workflow}),"
            f" or cancel the workflow first (pgtasks workflows cancel {workflow})"
        )
    return bool(row["deleted"]), str(row["status"])


@dataclasses.dataclass(frozen=True)
class PurgeCount:
    """What ``pgtasks purge`` would delete: ``jobs`` pending jobs up to ``max_id``, and
    the ``workflow_jobs`` pending workflow steps it leaves alone."""

    jobs: int
    max_id: int
    workflow_jobs: int


def count_purgeable(app: App, queue: str | None, task_name: str | None) -> PurgeCount:
    row = app.database.run(
        lambda conn: _admin(app).count_purgeable_jobs(conn, queue=queue, task_name=task_name)
    )
    return PurgeCount(int(row["jobs"]), int(row["max_id"] or 0), int(row["workflow_jobs"]))


def purge_jobs(app: App, queue: str | None, task_name: str | None, max_id: int) -> int:
    """Delete the pending jobs (not workflow steps) of a queue and a task (None: any) with
    ids up to ``max_id``, in batches of BATCH_SIZE, each its own transaction: the number
    deleted."""
    rows = _in_batches(
        app,
        lambda conn: _admin(app).purge_jobs(
            conn, queue=queue, task_name=task_name, max_id=max_id, limit=BATCH_SIZE
        ),
    )
    return len(rows)


@dataclasses.dataclass(frozen=True)
class QueueMove:
    """How a ``queues move`` ended: ``left`` unfinished jobs of the queue in the source
    store (0: drained, and the queue resumed in the target store)."""

    queue: str
    source: str
    target: str
    left: int

    @property
    def done(self) -> bool:
        return self.left == 0


def unfinished_in(app: App, queue: str) -> int:
    """Waiting, pending and running jobs of ``queue`` in ``app``'s store."""
    rows = app.database.run(_admin(app).count_stranded_jobs)
    return sum(int(row["jobs"]) for row in rows if row["queue"] == queue)


def move_queue(
    app: App,
    queue: str,
    target: str,
    *,
    source: str | None = None,
    timeout: float = 600.0,
    poll: float = 1.0,
    waiting: Callable[[int], None] | None = None,
) -> QueueMove:
    """Move ``queue`` from store ``source`` (default: where it routes now) to ``target``:
    pause it in ``target`` (jobs enqueued there once the route is switched wait, so none
    overtakes an older one), wait until ``source`` holds none of its jobs (its workers
    run them; the producers' route is switched meanwhile), then resume it in ``target``.
    ``waiting(left)`` is told the count while it waits. After ``timeout`` seconds: the
    count left, the queue still paused in ``target`` (run it again to keep waiting)."""
    check_name("queue", queue)
    app.store_router.layout.check_store(target)
    source = source if source is not None else app.store_of_queue(queue)
    app.store_router.layout.check_store(source)
    if source == target:
        raise ConfigurationError(
            f"queue {queue!r} routes to store {target!r} already: name the store it"
            " leaves with --from"
        )
    to_app, from_app = app.for_store(target), app.for_store(source)
    to_app.pause_queue(queue)
    deadline = time.monotonic() + timeout
    while True:
        left = unfinished_in(from_app, queue)
        if left == 0:
            to_app.resume_queue(queue)
            return QueueMove(queue, source, target, 0)
        if time.monotonic() >= deadline:
            return QueueMove(queue, source, target, left)
        if waiting is not None:
            waiting(left)
        time.sleep(min(poll, max(deadline - time.monotonic(), 0.0)))
