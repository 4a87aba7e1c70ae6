"""Repairs: the operators' writes on jobs, shared by ``pgtasks jobs|purge`` and
``pgtasks web`` (through ``app.admin``, an :class:`~pgtasks._app.admin.Admin`): retry
(one job, every failed job, or what a filter selects), cancellation of what a filter
selects, deletion of a finished job, purges.

Neither a retry nor a deletion may break a workflow: a job an unfinished workflow still
needs is not deleted, and a step cancelled before it received its input is retried with
that input (or waits for it again), or refused. A job id is acted on in the store that
issued it; the rest in the store of the App whose routing it is built from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import psycopg
from psycopg.errors import UniqueViolation

from .._errors import JobNotFoundError, UniqueKeyTakenError, WorkflowProtectedError
from .._job_filter import JobFilter
from .._operations import RETRYABLE
from .routing import Routing, StoreView

if TYPE_CHECKING:
    from .._store.ports import AdminPort

S = TypeVar("S", bound=StoreView)


def port(app: StoreView) -> AdminPort:
    """The statements the operators' reads and writes run: ``app``'s catalog seen
    through its port."""
    return app.queries


#: The unique index of keys unique while active.
ACTIVE_KEY_INDEX = "jobs_unique_active_idx"
#: Rows per UPDATE of a bulk retry or cancel (each batch commits on its own).
BATCH_SIZE = 1000
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


@dataclasses.dataclass(frozen=True)
class BulkRetry:
    """What a filtered retry did: the ids retried (pending, or waiting again for their
    workflow's earlier steps) and the workflow steps refused, with why (RETRY_RULE)."""

    retried: list[int]
    refused: dict[int, str]


@dataclasses.dataclass(frozen=True)
class PurgeCount:
    """What ``pgtasks purge`` would delete: ``jobs`` pending jobs up to ``max_id``, and
    the ``workflow_jobs`` pending workflow steps it leaves alone."""

    jobs: int
    max_id: int
    workflow_jobs: int


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


class Repairs(Generic[S]):
    """The operators' writes on the jobs of one App (``routing.here``, S: any
    :class:`StoreView`); a job id is acted on in the store that issued it."""

    def __init__(self, routing: Routing[S]) -> None:
        self.routing = routing

    @property
    def here(self) -> S:
        return self.routing.here

    def retry_job(self, job_id: int, *, keep_steps: bool = False) -> RetryResult:
        """Retry one failed or cancelled job (RETRY_RULE) and wake its queue's workers;
        JobNotFoundError when it does not exist. A durable job runs again from the top
        without its checkpoints, or with ``keep_steps`` those before its first failed step
        (they replay; that step runs again), as a fork keeps them.
        """
        owner = self.routing.for_id(job_id)  # the store that issued the id
        store = port(owner)
        kept = [0]

        def retry(conn: psycopg.Connection[Any]) -> Any:
            with conn.transaction():
                row = store.retry_job(conn, job_id)
                if row is not None and row["retried"]:
                    if keep_steps:
                        kept[0] = store.restore_job_steps(conn, job_id)
                    store.notify_queue(conn, row["queue"])
            return row

        try:
            row = owner.database.run(retry)
        except UniqueViolation as error:
            raise self._key_taken(owner, job_id, error) from None
        if row is None:
            raise _missing(job_id)
        if row["needs_input"] and row["previous_status"] in RETRYABLE:
            return self._retry_step(owner, job_id, row["previous_status"])
        return RetryResult(
            id=job_id,
            retried=bool(row["retried"]),
            previous_status=row["previous_status"],
            attempts=row["attempts"],
            max_attempts=row["max_attempts"],
            steps_kept=kept[0],
        )

    def _retry_step(self, owner: S, job_id: int, previous_status: str) -> RetryResult:
        """Retry a workflow step cancelled before it received its input (RETRY_RULE)."""
        store = port(owner)

        def retry(conn: psycopg.Connection[Any]) -> Any:
            row = store.retry_workflow_step(conn, job_id)
            if row["outcome"] == "pending":
                store.notify_queue(conn, row["queue"])
            return row

        row = owner.database.run(retry)
        if row["outcome"] == "missing":
            raise _missing(job_id)
        if row["outcome"] == "refused":
            raise WorkflowProtectedError(f"job {job_id} was not retried: {row['detail']}")
        if row["outcome"] not in ("pending", "waiting"):  # it changed meanwhile: retry normally
            return self.retry_job(job_id)
        return RetryResult(
            id=job_id,
            retried=True,
            previous_status=previous_status,
            attempts=0,
            max_attempts=None,
            status=row["outcome"],
        )

    def _key_taken(self, owner: S, job_id: int, error: UniqueViolation) -> UniqueKeyTakenError:
        """Why a retry of job ``job_id`` was refused: the job it would duplicate."""
        if error.diag.constraint_name != ACTIVE_KEY_INDEX:
            raise error
        holder = owner.database.run(lambda conn: port(owner).get_active_key_holder(conn, job_id))
        if holder is None:  # the holder finished meanwhile: the retry may be tried again
            return UniqueKeyTakenError(
                f"job {job_id} was not retried: another job held its unique key (unique while"
                " active) a moment ago; try again"
            )
        return UniqueKeyTakenError(
            f"job {job_id} was not retried: its unique key {holder['unique_key']!r} (unique"
            f" while active) is held by {holder['status']} job {holder['id']}; wait for that"
            f" job to finish, or cancel it (pgtasks jobs cancel {holder['id']}), then retry"
        )

    def _in_batches(
        self, batch: Callable[[AdminPort, psycopg.Connection[Any]], list[dict[str, Any]]]
    ) -> list[dict[str, Any]]:
        """Run ``batch`` (one committed UPDATE of up to BATCH_SIZE rows) until it comes up
        short; every queue a batch put jobs back into is notified.
        """
        store = port(self.here)

        def run(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
            rows: list[dict[str, Any]] = []
            while True:
                done = batch(store, conn)
                rows += done
                if len(done) < BATCH_SIZE:
                    break
            for queue in sorted({row["queue"] for row in rows if "queue" in row}):
                store.notify_queue(conn, queue)
            return rows

        return self.here.database.run(run)

    def retry_failed_jobs(self, task_name: str | None = None) -> list[int]:
        """Retry every failed job (of one task, or any): the ids retried, sorted."""
        try:
            rows = self._in_batches(
                lambda store, conn: store.retry_failed_jobs(
                    conn, task_name=task_name, limit=BATCH_SIZE
                )
            )
        except UniqueViolation as error:
            raise _batch_key_taken(error) from None
        return sorted(row["id"] for row in rows)

    def retry_matching(self, job_filter: JobFilter) -> list[int]:
        """Retry every failed or cancelled job the filter selects: the ids retried,
        sorted."""
        return self.retry_matching_steps(job_filter).retried

    def retry_matching_steps(self, job_filter: JobFilter) -> BulkRetry:
        """Retry every failed or cancelled job the filter selects, workflow steps that
        never received their input by RETRY_RULE (in id order: a chain's steps retried
        together wait for each other)."""
        try:
            rows = self._in_batches(
                lambda store, conn: store.retry_filtered_jobs(conn, job_filter, limit=BATCH_SIZE)
            )
        except UniqueViolation as error:
            raise _batch_key_taken(error) from None
        retried = [row["id"] for row in rows]
        refused: dict[int, str] = {}
        store = port(self.here)

        def steps(conn: psycopg.Connection[Any]) -> None:
            after = 0
            while True:
                batch = store.retry_filtered_steps(conn, job_filter, after=after, limit=BATCH_SIZE)
                for row in batch:
                    if row["outcome"] == "refused":
                        refused[row["id"]] = row["detail"]
                    elif row["outcome"] in ("pending", "waiting"):
                        retried.append(row["id"])
                        if row["outcome"] == "pending":
                            store.notify_queue(conn, row["queue"])
                if len(batch) < BATCH_SIZE:
                    return
                after = batch[-1]["id"]

        self.here.database.run(steps)
        return BulkRetry(sorted(retried), refused)

    def cancel_matching(self, job_filter: JobFilter) -> dict[str, list[int]]:
        """Cancel every pending job and ask every running job to stop that the filter
        selects: ``{"cancelled": ids, "requested": ids}``.
        """
        rows = self._in_batches(
            lambda store, conn: store.cancel_filtered_jobs(conn, job_filter, limit=BATCH_SIZE)
        )
        return {
            "cancelled": sorted(row["id"] for row in rows if row["status"] == "cancelled"),
            "requested": sorted(row["id"] for row in rows if row["status"] == "running"),
        }

    def delete_finished_job(self, job_id: int) -> tuple[bool, str]:
        """Delete one done, failed or cancelled job: (deleted, its status). A pending or
        running job is kept (False); JobNotFoundError when it does not exist;
        WorkflowProtectedError for a job of a workflow that has not finished (its later
        steps read this job's result, its handle returns it).
        """
        owner = self.routing.for_id(job_id)  # the store that issued the id
        row = owner.database.run(lambda conn: port(owner).delete_finished_job(conn, job_id))
        if row is None:
            raise _missing(job_id)
        if row["workflow_unfinished"] and row["status"] in ("done", "failed", "cancelled"):
            workflow = row["workflow_id"]
            raise WorkflowProtectedError(
                f"job {job_id} was not deleted: it is step {row['workflow_step']} of workflow"
                f" {workflow}, which has not finished (its later steps read this job's"
                f" result). Delete it once the workflow has finished (pgtasks workflows show"
                f" {workflow}), or cancel the workflow first (pgtasks workflows cancel"
                f" {workflow})"
            )
        return bool(row["deleted"]), str(row["status"])

    def count_purgeable(self, queue: str | None, task_name: str | None) -> PurgeCount:
        row = self.here.database.run(
            lambda conn: port(self.here).count_purgeable_jobs(
                conn, queue=queue, task_name=task_name
            )
        )
        return PurgeCount(int(row["jobs"]), int(row["max_id"] or 0), int(row["workflow_jobs"]))

    def purge_jobs(self, queue: str | None, task_name: str | None, max_id: int) -> int:
        """Delete the pending jobs (not workflow steps) of a queue and a task (None: any)
        with ids up to ``max_id``, in batches of BATCH_SIZE, each its own transaction: the
        number deleted."""
        rows = self._in_batches(
            lambda store, conn: store.purge_jobs(
                conn, queue=queue, task_name=task_name, max_id=max_id, limit=BATCH_SIZE
            )
        )
        return len(rows)
