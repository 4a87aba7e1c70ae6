"""Store: the only module that runs SQL.

Each public method runs one named query from ``sql/*.sql`` (the method's name is
the query's name). Areas with many queries keep them in a mixin of their own
(``_store_<area>.py`` + ``sql/<area>.sql``) that Store inherits. Statements are
composed once per App with the schema as a ``psycopg.sql.Identifier``.
Producer-facing methods have an ``a``-prefixed async twin; both build their
parameters with the same pure helper, so the logic is written once and the twins
only differ in how they await the driver.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.pq import PipelineStatus, TransactionStatus
from psycopg.rows import RowFactory, dict_row, tuple_row

from .._jobs import InsertedJob, JobBatch, JobRow, JobSpec, JobStatus, ScopedJobSpec
from ..sql import Migration
from .base import ADVISORY_LOCK_CLASS_BEAT as ADVISORY_LOCK_CLASS_BEAT
from .base import ADVISORY_LOCK_CLASS_MIGRATE as ADVISORY_LOCK_CLASS_MIGRATE
from .base import JsonbTextLoader, Params, Row, StoreBase, translate_errors
from .base import notification_channel as notification_channel
from .counters import CounterQueries
from .doctor import DoctorQueries
from .limits import LimitedClaimReport, LimitQueries, split_limited_rows
from .metrics import MetricsQueries
from .migrations import MigrationQueries
from .operations import OperationsQueries
from .params import batch_params, copy_chunks, job_params, jobs_columns
from .queues import QueueQueries
from .unique import UniqueQueries, aatomic, atomic
from .web import WebQueries
from .workflows import WorkflowQueries

#: An attempt's outcome as written: (id, attempt, status, result_json, error, delay,
#: exception_type).
OutcomeRow = (
    tuple[int, int, str, "str | None", "str | None", float, "str | None"]
    | tuple[int, int, str, "str | None", "str | None", float]
)

#: Where a claim stopped in claim order: (priority, run_at, id) of the last job it took.
ClaimPosition = tuple[int, datetime, int]


def claim_position(row: Row) -> ClaimPosition:
    """The position of a claimed row (the last of a claim, in claim order)."""
    return (row["priority"], row["run_at"], row["id"])


def _claim_order(row: Row) -> tuple[int, datetime, int]:
    """Sort key of a claimed row in claim order (priority DESC, run_at, id)."""
    return (-row["priority"], row["run_at"], row["id"])


def _own_transaction(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """True when the next statement on ``conn`` runs as a transaction of its own.

    ``insert_and_notify_job`` sets a transaction-local flag that silences the notify trigger:
    inside a longer transaction it would silence the caller's later inserts too.
    """
    pgconn = conn.pgconn
    return (
        conn.autocommit
        and pgconn.transaction_status == TransactionStatus.IDLE
        # In pipeline mode, the statements up to the next sync share one transaction.
        and pgconn.pipeline_status == PipelineStatus.OFF
    )


def _pinned_per_transaction(conn: psycopg.Connection[Any]) -> bool:
    """``conn`` goes through a transaction pooler (Database.pin_isolation set its
    isolation level) and runs each statement as a transaction of its own: a round trip
    that relies on READ COMMITTED begins its own transaction at that level."""
    return conn.isolation_level is not None and _own_transaction(conn)


def _roll_back_failed_block(conn: psycopg.Connection[Any]) -> None:
    """A statement of a pinned round trip failed: the server skipped the rest (the COMMIT
    too), so the transaction it began is still open, aborted. End it; the connection stays
    usable (a broken one is replaced by its owner)."""
    if conn.closed or conn.broken:
        return
    if conn.pgconn.transaction_status != TransactionStatus.IDLE:
        with contextlib.suppress(psycopg.Error):
            conn.rollback()


#: Batches of at least this many plain jobs go by COPY (Store.copy_new_jobs): two round
#: trips instead of one, but for many jobs far less work for both ends than the arrays of
#: insert_new_jobs (measured by benchmarks/enqueue.py).
COPY_MIN_JOBS = 64


def _copyable(
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], specs: Sequence[JobSpec]
) -> bool:
    """Whether plain specs without keys (insert_new_jobs') can go by COPY: enough of them,
    none with a time to run at (COPY writes no expression: the column's now() applies),
    and the connection not in pipeline mode (COPY cannot run there)."""
    return (
        len(specs) >= COPY_MIN_JOBS
        and conn.pgconn.pipeline_status == PipelineStatus.OFF
        and all(spec.run_at is None and spec.delay_seconds is None for spec in specs)
    )


def _outcome_id(outcome: OutcomeRow) -> int:
    return outcome[0]


class Store(
    CounterQueries,
    DoctorQueries,
    LimitQueries,
    MetricsQueries,
    MigrationQueries,
    OperationsQueries,
    QueueQueries,
    UniqueQueries,
    WebQueries,
    WorkflowQueries,
    StoreBase,
):
    """Every named query pgtasks runs, one method each."""

    # -- migrations --
    def create_migrations_table(self, conn: psycopg.Connection[Any]) -> None:
        self._rows(conn, "create_migrations_table", None)

    def lock_migrations(self, conn: psycopg.Connection[Any]) -> None:
        params = {"lock_class": ADVISORY_LOCK_CLASS_MIGRATE, "schema": self.schema}
        self._rows(conn, "lock_migrations", params)

    def get_applied_migrations(self, conn: psycopg.Connection[Any]) -> set[int]:
        return {row["version"] for row in self._rows(conn, "get_applied_migrations", None)}

    def record_migration(self, conn: psycopg.Connection[Any], migration: Migration) -> None:
        params = {"version": migration.version, "name": migration.name}
        self._rows(conn, "record_migration", params)

    # -- transaction blocks through a pooler (Database.pin_isolation) --
    def begin_read_committed_block(self, conn: psycopg.Connection[Any]) -> None:
        """Begin a transaction block, READ COMMITTED whatever the server's default (on an
        autocommit connection; a pipelined round trip sends the same statement)."""
        self._rows(conn, "begin_read_committed_block", None)

    def commit_block(self, conn: psycopg.Connection[Any]) -> None:
        self._rows(conn, "commit_block", None)

    def get_schema_version(self, conn: psycopg.Connection[Any]) -> int:
        return int(self._rows(conn, "get_schema_version", None)[0]["version"])

    async def aget_schema_version(self, conn: psycopg.AsyncConnection[Any]) -> int:
        return int((await self._arows(conn, "get_schema_version", None))[0]["version"])

    # -- enqueue --
    @staticmethod
    def _job_params(spec: JobSpec) -> Params:
        """Parameters of ``insert_job`` / ``insert_new_job`` (the latter ignores the key)."""
        return job_params(spec)

    def insert_job(self, conn: psycopg.Connection[Any], spec: JobSpec) -> InsertedJob:
        """Insert one job; an existing idempotency key answers with its job."""
        if isinstance(spec, ScopedJobSpec):
            return self.insert_scoped_jobs(conn, [spec])[0]
        if spec.limit_groups is not None:
            return self.insert_limited_job(conn, spec)
        if spec.idempotency_key is None:
            if _own_transaction(conn):
                return InsertedJob(self.insert_and_notify_job(conn, spec), False)
            return InsertedJob(self.insert_new_job(conn, spec), False)
        row = self._rows(conn, "insert_job", self._job_params(spec), tuples=True)[0]
        return InsertedJob(row[0], row[1])

    async def ainsert_job(self, conn: psycopg.AsyncConnection[Any], spec: JobSpec) -> InsertedJob:
        if isinstance(spec, ScopedJobSpec):
            return (await self.ainsert_scoped_jobs(conn, [spec]))[0]
        if spec.limit_groups is not None:
            return await self.ainsert_limited_job(conn, spec)
        if spec.idempotency_key is None:
            if _own_transaction(conn):
                return InsertedJob(await self.ainsert_and_notify_job(conn, spec), False)
            return InsertedJob(await self.ainsert_new_job(conn, spec), False)
        row = (await self._arows(conn, "insert_job", self._job_params(spec), tuples=True))[0]
        return InsertedJob(row[0], row[1])

    def insert_and_notify_job(self, conn: psycopg.Connection[Any], spec: JobSpec) -> int:
        """The id of a new job for a spec without an idempotency key, inserted by a
        statement that is a transaction of its own (see ``_own_transaction``): it notifies
        by itself and switches the notify trigger off until its commit.
        """
        params = self._job_params(spec)
        return int(self._rows(conn, "insert_and_notify_job", params, tuples=True)[0][0])

    async def ainsert_and_notify_job(
        self, conn: psycopg.AsyncConnection[Any], spec: JobSpec
    ) -> int:
        params = self._job_params(spec)
        return int((await self._arows(conn, "insert_and_notify_job", params, tuples=True))[0][0])

    def insert_new_job(self, conn: psycopg.Connection[Any], spec: JobSpec) -> int:
        """The id of a new job for a spec without an idempotency key (any transaction)."""
        row = self._rows(conn, "insert_new_job", self._job_params(spec), tuples=True)[0]
        return int(row[0])

    async def ainsert_new_job(self, conn: psycopg.AsyncConnection[Any], spec: JobSpec) -> int:
        row = (await self._arows(conn, "insert_new_job", self._job_params(spec), tuples=True))[0]
        return int(row[0])

    @staticmethod
    def _new_jobs_params(specs: Sequence[JobSpec]) -> Params:
        """Columns of ``insert_new_jobs`` (see params.py)."""
        return jobs_columns(specs, keys=False)

    @staticmethod
    def _unique_specs(specs: Sequence[JobSpec]) -> tuple[list[JobSpec], list[int]]:
        """The specs to send (a key repeated within the batch is sent once) and, for every
        spec, the index of the row that answers it."""
        first_row_of_key: dict[str, int] = {}
        answer: list[int] = []
        sent: list[JobSpec] = []
        for spec in specs:
            key = spec.idempotency_key
            if key is not None and key in first_row_of_key:
                answer.append(first_row_of_key[key])
                continue
            if key is not None:
                first_row_of_key[key] = len(sent)
            answer.append(len(sent))
            sent.append(spec)
        return sent, answer

    @staticmethod
    def _insert_jobs_plan(specs: Sequence[JobSpec]) -> tuple[Params, list[int]]:
        """Columns for ``insert_jobs``; duplicate keys within the batch are sent once.

        Returns the parameters and, for every spec, the index of the row that answers it.
        """
        sent, answer = Store._unique_specs(specs)
        params = dict(Store._new_jobs_params(sent))
        params["idempotency_key"] = [spec.idempotency_key for spec in sent]
        return params, answer

    @staticmethod
    def _inserted(rows: list[tuple[Any, ...]], answer: list[int]) -> list[InsertedJob]:
        results: list[InsertedJob] = []
        sent = set()
        for row_index in answer:
            row = rows[row_index]
            # A key repeated within the batch: the later specs find the job existing.
            existed = bool(row[1]) or row_index in sent
            sent.add(row_index)
            results.append(InsertedJob(row[0], existed))
        return results

    def insert_jobs(
        self, conn: psycopg.Connection[Any], specs: Sequence[JobSpec]
    ) -> list[InsertedJob]:
        """Insert jobs in order; an existing idempotency key answers with its job."""
        if len(specs) == 1:
            return [self.insert_job(conn, specs[0])]
        if type(specs) is JobBatch:
            return self.insert_batch_jobs(conn, specs)
        if any(isinstance(spec, ScopedJobSpec) for spec in specs):
            return self.insert_mixed_jobs(conn, specs)  # one statement per scope
        if any(spec.limit_groups is not None for spec in specs):
            sent, answer = self._unique_specs(specs)
            with atomic(conn) if len(sent) < len(specs) else nullcontext():
                rows = self.insert_limited_jobs(conn, sent)
                self.count_repeated_keys(conn, len(specs) - len(sent))
            return self._inserted(rows, answer)
        # The fast path: plain jobs without keys (a scoped job's key is not idempotency_key).
        if all(spec.idempotency_key is None and type(spec) is JobSpec for spec in specs):
            if _copyable(conn, specs):
                return self.copy_new_jobs(conn, specs)
            return self.insert_new_jobs(conn, self._new_jobs_params(specs))
        params, answer = self._insert_jobs_plan(specs)
        repeated = len(answer) - len(params["task_name"])
        with atomic(conn) if repeated else nullcontext():
            rows = self._rows(conn, "insert_jobs", params, binary=True, tuples=True)
            self.count_repeated_keys(conn, repeated)
        return self._inserted(rows, answer)

    async def ainsert_jobs(
        self, conn: psycopg.AsyncConnection[Any], specs: Sequence[JobSpec]
    ) -> list[InsertedJob]:
        if len(specs) == 1:
            return [await self.ainsert_job(conn, specs[0])]
        if type(specs) is JobBatch:
            return await self.ainsert_batch_jobs(conn, specs)
        if any(isinstance(spec, ScopedJobSpec) for spec in specs):
            return await self.ainsert_mixed_jobs(conn, specs)
        if any(spec.limit_groups is not None for spec in specs):
            sent, answer = self._unique_specs(specs)
            async with aatomic(conn) if len(sent) < len(specs) else nullcontext():
                rows = await self.ainsert_limited_jobs(conn, sent)
                await self.acount_repeated_keys(conn, len(specs) - len(sent))
            return self._inserted(rows, answer)
        if all(spec.idempotency_key is None and type(spec) is JobSpec for spec in specs):
            if _copyable(conn, specs):
                return await self.acopy_new_jobs(conn, specs)
            return await self.ainsert_new_jobs(conn, self._new_jobs_params(specs))
        params, answer = self._insert_jobs_plan(specs)
        repeated = len(answer) - len(params["task_name"])
        async with aatomic(conn) if repeated else nullcontext():
            rows = await self._arows(conn, "insert_jobs", params, binary=True, tuples=True)
            await self.acount_repeated_keys(conn, repeated)
        return self._inserted(rows, answer)

    def insert_new_jobs(self, conn: psycopg.Connection[Any], params: Params) -> list[InsertedJob]:
        """The fast path of insert_jobs: no spec has a key (plain INSERT, no arbitration).

        ``params`` holds one list per column (see ``_new_jobs_params``), sent in binary.
        """
        rows = self._rows(conn, "insert_new_jobs", params, binary=True, tuples=True)
        return [InsertedJob(row[0], False) for row in rows]

    async def ainsert_new_jobs(
        self, conn: psycopg.AsyncConnection[Any], params: Params
    ) -> list[InsertedJob]:
        rows = await self._arows(conn, "insert_new_jobs", params, binary=True, tuples=True)
        return [InsertedJob(row[0], False) for row in rows]

    def insert_batch_jobs(
        self, conn: psycopg.Connection[Any], batch: JobBatch
    ) -> list[InsertedJob]:
        """Insert delay_many's jobs: one statement, their shared fields once and their
        arguments as two JSON arrays (the client joins texts; nothing per job is adapted)."""
        rows = self._rows(conn, "insert_batch_jobs", batch_params(batch), tuples=True)
        return [InsertedJob(row[0], False) for row in rows]

    async def ainsert_batch_jobs(
        self, conn: psycopg.AsyncConnection[Any], batch: JobBatch
    ) -> list[InsertedJob]:
        rows = await self._arows(conn, "insert_batch_jobs", batch_params(batch), tuples=True)
        return [InsertedJob(row[0], False) for row in rows]

    def copy_new_jobs(
        self, conn: psycopg.Connection[Any], specs: Sequence[JobSpec]
    ) -> list[InsertedJob]:
        """insert_new_jobs for a large batch of plain jobs (see ``_copyable``): their ids
        from next_job_ids, then the rows by copy_jobs. Two round trips and no BEGIN or
        COMMIT on an autocommit connection (the ids are taken outside any transaction: a
        failed COPY leaves a gap in the sequence, as a failed INSERT does, and no row).
        """
        ids = self.next_job_ids(conn, len(specs))
        self.copy_jobs(conn, ids, specs)
        return [InsertedJob(job_id, False) for job_id in ids]

    async def acopy_new_jobs(
        self, conn: psycopg.AsyncConnection[Any], specs: Sequence[JobSpec]
    ) -> list[InsertedJob]:
        ids = await self.anext_job_ids(conn, len(specs))
        await self.acopy_jobs(conn, ids, specs)
        return [InsertedJob(job_id, False) for job_id in ids]

    def next_job_ids(self, conn: psycopg.Connection[Any], count: int) -> list[int]:
        """``count`` new job ids, increasing."""
        params = {"count": count, "jobs_table": self.jobs_table}
        return [row[0] for row in self._rows(conn, "next_job_ids", params, tuples=True)]

    async def anext_job_ids(self, conn: psycopg.AsyncConnection[Any], count: int) -> list[int]:
        params = {"count": count, "jobs_table": self.jobs_table}
        return [row[0] for row in await self._arows(conn, "next_job_ids", params, tuples=True)]

    def copy_jobs(
        self, conn: psycopg.Connection[Any], ids: Sequence[int], specs: Sequence[JobSpec]
    ) -> None:
        """Write plain jobs (see ``_copyable``) with these ids by COPY."""
        self._copy(conn, "copy_jobs", copy_chunks(ids, specs))

    async def acopy_jobs(
        self, conn: psycopg.AsyncConnection[Any], ids: Sequence[int], specs: Sequence[JobSpec]
    ) -> None:
        await self._acopy(conn, "copy_jobs", copy_chunks(ids, specs))

    def update_job_meta(
        self,
        conn: psycopg.Connection[Any],
        *,
        job_id: int,
        worker_id: int,
        attempt: int,
        patch_json: str,
    ) -> bool:
        """Merge a JSON object into a running job's meta; False when the lease is lost."""
        params = {"id": job_id, "worker_id": worker_id, "attempt": attempt, "patch": patch_json}
        return bool(self._rows(conn, "update_job_meta", params))

    # -- reading jobs --
    def get_job(self, conn: psycopg.Connection[Any], job_id: int) -> JobRow | None:
        rows = self._rows(conn, "get_job", {"id": job_id})
        return JobRow.from_row(rows[0]) if rows else None

    async def aget_job(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> JobRow | None:
        rows = await self._arows(conn, "get_job", {"id": job_id})
        return JobRow.from_row(rows[0]) if rows else None

    def get_jobs(self, conn: psycopg.Connection[Any], job_ids: Sequence[int]) -> list[JobRow]:
        rows = self._rows(conn, "get_jobs", {"ids": list(job_ids)})
        return [JobRow.from_row(row) for row in rows]

    async def aget_jobs(
        self, conn: psycopg.AsyncConnection[Any], job_ids: Sequence[int]
    ) -> list[JobRow]:
        rows = await self._arows(conn, "get_jobs", {"ids": list(job_ids)})
        return [JobRow.from_row(row) for row in rows]

    def get_job_status(self, conn: psycopg.Connection[Any], job_id: int) -> JobStatus | None:
        rows = self._rows(conn, "get_job_status", {"id": job_id})
        return JobStatus(rows[0]["status"]) if rows else None

    async def aget_job_status(
        self, conn: psycopg.AsyncConnection[Any], job_id: int
    ) -> JobStatus | None:
        rows = await self._arows(conn, "get_job_status", {"id": job_id})
        return JobStatus(rows[0]["status"]) if rows else None

    # -- workers --
    def register_worker(
        self,
        conn: psycopg.Connection[Any],
        *,
        hostname: str,
        pid: int,
        queues: Sequence[str] | None,
        concurrency: int,
        task_names: Sequence[str] | None = None,
    ) -> int:
        """A new registration (its id is the lease owner of the worker's claims);
        ``task_names``: the tasks the worker knows (None: any, as before migration flow_control)."""
        params = {
            "hostname": hostname,
            "pid": pid,
            "queues": list(queues) if queues is not None else None,
            "concurrency": concurrency,
            "task_names": list(task_names) if task_names is not None else None,
        }
        return int(self._rows(conn, "register_worker", params)[0]["id"])

    def heartbeat_worker(self, conn: psycopg.Connection[Any], worker_id: int) -> bool:
        """Refresh the heartbeat; False when the registration is gone."""
        return bool(self._rows(conn, "heartbeat_worker", {"worker_id": worker_id}))

    def deregister_worker(self, conn: psycopg.Connection[Any], worker_id: int) -> None:
        self._rows(conn, "deregister_worker", {"worker_id": worker_id})

    @staticmethod
    def _claim_params(
        worker_id: int,
        queues: Sequence[str] | None,
        limit: int,
        task_names: Sequence[str] | None,
        after: ClaimPosition | None = None,
        excluded_queues: Sequence[str] | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """The claim statement's name and parameters (``claim_jobs_after`` from a position).

        ``excluded_queues``: queues left out (paused); None or empty leaves none out.
        """
        params: dict[str, Any] = {
            "worker_id": worker_id,
            "queues": list(queues) if queues is not None else None,
            "excluded_queues": list(excluded_queues) if excluded_queues else None,
            "limit": limit,
            "task_names": list(task_names) if task_names is not None else None,
        }
        if after is None:
            return "claim_jobs", params
        params["after_priority"], params["after_run_at"], params["after_id"] = after
        return "claim_jobs_after", params

    @staticmethod
    def _finish_params(worker_id: int, outcomes: Sequence[OutcomeRow]) -> dict[str, Any]:
        """finish_jobs' parameters (sent in binary): the numbers, statuses and the expected
        status as comma-joined text, result, error and exception type as arrays (texts of
        any content; the exception type is optional: 6-tuples are accepted).

        Outcomes go in job id order, so the rows are locked in that order. The workflow
        steps a finish moves on are locked by the workflow triggers, in job id order too,
        whatever the order of the outcomes (migration workflow_progress).
        """
        outcomes = sorted(outcomes, key=_outcome_id)
        return {
            "worker_id": worker_id,
            "id": ",".join([str(outcome[0]) for outcome in outcomes]),
            "attempt": ",".join([str(outcome[1]) for outcome in outcomes]),
            "status": ",".join([outcome[2] for outcome in outcomes]),
            "result": [outcome[3] for outcome in outcomes],
            "error": [outcome[4] for outcome in outcomes],
            "delay": ",".join([repr(float(outcome[5])) for outcome in outcomes]),
            "held": ",".join(["running"] * len(outcomes)),
            "exception_type": [outcome[6] if len(outcome) > 6 else None for outcome in outcomes],
        }

    @staticmethod
    def _in_claim_order(rows: list[Row]) -> list[Row]:
        # UPDATE … RETURNING does not keep the CTE's order: restore the claim order.
        rows.sort(key=_claim_order)
        return rows

    def claim_jobs(
        self,
        conn: psycopg.Connection[Any],
        *,
        worker_id: int,
        queues: Sequence[str] | None,
        limit: int,
        task_names: Sequence[str] | None = None,
        excluded_queues: Sequence[str] | None = None,
    ) -> list[Row]:
        """Claim up to ``limit`` due jobs; ``task_names`` restricts to known tasks,
        ``excluded_queues`` leaves queues out (paused ones)."""
        _, params = self._claim_params(
            worker_id, queues, limit, task_names, excluded_queues=excluded_queues
        )
        return self._in_claim_order(self._rows(conn, "claim_jobs", params))

    def claim_jobs_after(
        self,
        conn: psycopg.Connection[Any],
        *,
        after: ClaimPosition,
        worker_id: int,
        queues: Sequence[str] | None,
        limit: int,
        task_names: Sequence[str] | None = None,
        excluded_queues: Sequence[str] | None = None,
    ) -> list[Row]:
        """``claim_jobs`` reading on from ``after``, the :func:`claim_position` of the last
        job a previous claim took (jobs of its priority sorting before it are not read)."""
        _, params = self._claim_params(worker_id, queues, limit, task_names, after, excluded_queues)
        return self._in_claim_order(self._rows(conn, "claim_jobs_after", params))

    def finish_jobs(
        self,
        conn: psycopg.Connection[Any],
        *,
        worker_id: int,
        outcomes: Sequence[OutcomeRow],
    ) -> dict[int, str]:
        """Write outcomes ``(id, attempt, status, result_json, error, delay, exception_type)``,
        fenced (an outcome with an error appends to the job's attempt history).

        Returns the status written per id whose write took effect (``cancelled`` when a
        cancellation was requested); the other ids had lost their lease.
        """
        params = self._finish_params(worker_id, outcomes)
        rows = self._rows(conn, "finish_jobs", params, binary=True)
        return {row["id"]: row["status"] for row in rows}

    def finish_and_claim_jobs(
        self,
        conn: psycopg.Connection[Any],
        *,
        finished: Sequence[tuple[int, Sequence[OutcomeRow]]],
        worker_id: int,
        queues: Sequence[str] | None,
        limit: int,
        task_names: Sequence[str] | None = None,
        after: ClaimPosition | None = None,
        excluded_queues: Sequence[str] | None = None,
        limited: bool = False,
        claimed_rows: RowFactory[Any] = dict_row,
        claim_order: Callable[[Any], Any] = _claim_order,
        report: LimitedClaimReport | None = None,
    ) -> tuple[dict[int, str], list[Any]]:
        """``finish_jobs`` for each ``(lease owner, outcomes)`` then ``claim_jobs`` (when
        ``limit`` > 0; from ``after`` when given; leaving out ``excluded_queues``): one
        transaction, one network round trip (pipeline mode).

        ``limited`` (some limit is stored, migration 0009): the round trip claims jobs that
        limits apply to (claim_limited, migration flow_control) instead, and when those do not fill
        ``limit``, a second round trip claims plain jobs for the rest. Claimed rows come
        limited first (in the order the limited claim took them), then plain ones in claim
        order. What held limited jobs back, or the error that ended the limited claim (it
        never raises one: the plain claim goes on), goes into ``report``. The second round
        trip is a transaction of its own: when the server refuses it (the connection still
        usable), the first one's outcomes and claims stand and are returned, and its error
        goes into ``report.plain_error`` (the plain claim is tried again next time).

        ``claimed_rows`` makes each claimed row (a dict by default; the worker builds its
        jobs straight from the values) and ``claim_order`` is the sort key that puts plain
        rows in claim order (of a dict row by default).

        A single statement (a claim with nothing to write, or the outcomes of one lease
        owner with nothing to claim) runs alone on an autocommit connection: no pipeline
        or transaction block around it, which saves ~0.3 ms of the claim an idle worker
        makes for a new job.
        """
        rows_and_order = (claimed_rows, claim_order)
        if limited and limit > 0:
            accepted, rows = self._finish_and_claim(
                conn, finished, worker_id, queues, limit, task_names, None, excluded_queues,
                True, *rows_and_order,
            )  # fmt: skip
            rows = split_limited_rows(rows, report)
            if len(rows) < limit:
                try:
                    _, plain = self._finish_and_claim(
                        conn, [], worker_id, queues, limit - len(rows), task_names, after,
                        excluded_queues, False, *rows_and_order,
                    )  # fmt: skip
                except psycopg.Error as error:
                    if conn.closed or conn.broken or report is None:
                        raise
                    # The outcomes written and the jobs claimed by the first round trip
                    # are committed: they must reach the worker, whatever the second did.
                    report.plain_error = f"{type(error).__name__}: {str(error).strip()}"
                    plain = []
                rows += plain
            return accepted, rows
        return self._finish_and_claim(
            conn, finished, worker_id, queues, limit, task_names, after, excluded_queues,
            False, *rows_and_order,
        )  # fmt: skip

    def _claim_statement(
        self,
        limited: bool,
        worker_id: int,
        queues: Sequence[str] | None,
        limit: int,
        task_names: Sequence[str] | None,
        after: ClaimPosition | None,
        excluded_queues: Sequence[str] | None,
    ) -> tuple[str, dict[str, Any]]:
        """The claim a round trip runs: the limited claim, or the plain one (from ``after``)."""
        if limited:
            params = self.limited_claim_params(
                worker_id, queues, limit, task_names, excluded_queues
            )
            return "claim_limited", dict(params)
        return self._claim_params(worker_id, queues, limit, task_names, after, excluded_queues)

    def _finish_and_claim(
        self,
        conn: psycopg.Connection[Any],
        finished: Sequence[tuple[int, Sequence[OutcomeRow]]],
        worker_id: int,
        queues: Sequence[str] | None,
        limit: int,
        task_names: Sequence[str] | None,
        after: ClaimPosition | None,
        excluded_queues: Sequence[str] | None,
        limited: bool,
        claimed_rows: RowFactory[Any],
        claim_order: Callable[[Any], Any],
    ) -> tuple[dict[int, str], list[Any]]:
        # Through a transaction pooler (Database.pin_isolation) the round trip begins and
        # ends a READ COMMITTED transaction of its own, in the same pipeline.
        pinned = _pinned_per_transaction(conn)
        if conn.autocommit and not finished and limit > 0 and not pinned:
            name, params = self._claim_statement(
                limited, worker_id, queues, limit, task_names, after, excluded_queues
            )
            with translate_errors(self.schema), conn.cursor(row_factory=claimed_rows) as cursor:
                cursor.adapters.register_loader("jsonb", JsonbTextLoader)
                # A claim alone announces itself (no finish notifies in its transaction).
                cursor.execute(self._statements[f"{name}_announced"], params)
                claimed = cursor.fetchall()
            if not limited:
                claimed.sort(key=claim_order)
            return {}, claimed
        if conn.autocommit and len(finished) == 1 and limit <= 0 and not pinned:
            owner, outcomes = finished[0]
            return self.finish_jobs(conn, worker_id=owner, outcomes=outcomes), []
        cursors = []
        # On an autocommit connection the statements of a pipeline up to its sync run as
        # one implicit transaction (an error in one rolls them all back): no BEGIN and
        # COMMIT, which psycopg's transaction() in a pipeline sends with a sync (and a
        # round trip) each, about three round trips instead of one.
        block: contextlib.AbstractContextManager[Any] = (
            contextlib.nullcontext() if _own_transaction(conn) else conn.transaction()
        )
        try:
            with translate_errors(self.schema), conn.pipeline(), block:
                if pinned:
                    conn.cursor().execute(self._statements["begin_read_committed_block"])
                for owner, outcomes in finished:
                    cursor = conn.cursor(row_factory=tuple_row)
                    cursor.execute(
                        self._binary_statements["finish_jobs"],
                        self._finish_params(owner, outcomes),
                    )
                    cursors.append(cursor)
                claim_cursor = None
                if limit > 0:
                    claim_cursor = conn.cursor(row_factory=claimed_rows)
                    claim_cursor.adapters.register_loader("jsonb", JsonbTextLoader)
                    name, params = self._claim_statement(
                        limited, worker_id, queues, limit, task_names, after, excluded_queues
                    )
                    if not cursors:  # nothing finished in this transaction: announce it
                        name = f"{name}_announced"
                    claim_cursor.execute(self._statements[name], params)
                if pinned:
                    conn.cursor().execute(self._statements["commit_block"])
        except BaseException:
            if pinned:
                _roll_back_failed_block(conn)
            raise
        # finish_jobs returns (id, status, notifications sent).
        accepted = {row[0]: row[1] for cursor in cursors for row in cursor.fetchall()}
        claimed = claim_cursor.fetchall() if claim_cursor else []
        if not limited:
            claimed.sort(key=claim_order)
        return accepted, claimed

    def release_jobs(
        self, conn: psycopg.Connection[Any], *, worker_id: int, leases: Sequence[tuple[int, int]]
    ) -> set[int]:
        """Give ``(id, attempt)`` leases back as pending without using up the attempt."""
        params = {
            "worker_id": worker_id,
            "id": [job_id for job_id, _ in leases],
            "attempt": [attempt for _, attempt in leases],
        }
        return {row["id"] for row in self._rows(conn, "release_jobs", params)}

    def release_orphaned_jobs(
        self, conn: psycopg.Connection[Any], *, worker_id: int, known_ids: Sequence[int]
    ) -> set[int]:
        params = {"worker_id": worker_id, "known_ids": list(known_ids)}
        return {row["id"] for row in self._rows(conn, "release_orphaned_jobs", params)}

    def rescue_jobs(self, conn: psycopg.Connection[Any], *, lease_timeout: float) -> list[Row]:
        return self._rows(conn, "rescue_jobs", {"lease_timeout": lease_timeout})

    def delete_dead_workers(
        self, conn: psycopg.Connection[Any], *, lease_timeout: float
    ) -> list[Row]:
        return self._rows(conn, "delete_dead_workers", {"lease_timeout": lease_timeout})

    def notify_queue(self, conn: psycopg.Connection[Any], queue: str) -> None:
        self._rows(conn, "notify_queue", {"queue": queue})

    def listen(self, conn: psycopg.Connection[Any], *channels: str) -> None:
        """LISTEN on channels (default: enqueues); identifiers composed, never interpolated."""
        for channel in channels or (self.channel,):
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))

    # -- results and cancellation --
    def cancel_job(self, conn: psycopg.Connection[Any], job_id: int) -> Row | None:
        """``previous_status`` and ``status`` of the job, or None when it does not exist."""
        rows = self._rows(conn, "cancel_job", {"id": job_id})
        return rows[0] if rows else None

    async def acancel_job(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> Row | None:
        rows = await self._arows(conn, "cancel_job", {"id": job_id})
        return rows[0] if rows else None

    def get_cancel_requests(self, conn: psycopg.Connection[Any], worker_id: int) -> set[int]:
        return {
            row["id"] for row in self._rows(conn, "get_cancel_requests", {"worker_id": worker_id})
        }

    def get_job_outcome(self, conn: psycopg.Connection[Any], job_id: int) -> Row | None:
        rows = self._rows(conn, "get_job_outcome", {"id": job_id})
        return rows[0] if rows else None

    async def aget_job_outcome(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> Row | None:
        rows = await self._arows(conn, "get_job_outcome", {"id": job_id})
        return rows[0] if rows else None

    def notify_done(self, conn: psycopg.Connection[Any], job_ids: Sequence[int]) -> None:
        if job_ids:
            self._rows(conn, "notify_done", {"ids": ",".join(str(job_id) for job_id in job_ids)})

    # -- beat --
    def configure_beat_session(
        self,
        conn: psycopg.Connection[Any],
        *,
        statement_timeout: float,
        lock_timeout: float,
        keepalives_idle: int,
        keepalives_interval: int,
        keepalives_count: int,
    ) -> None:
        """Session settings of beat's connection (timeouts in seconds)."""
        params = {
            "statement_timeout": f"{round(statement_timeout * 1000)}ms",
            "lock_timeout": f"{round(lock_timeout * 1000)}ms",
            "keepalives_idle": str(keepalives_idle),
            "keepalives_interval": str(keepalives_interval),
            "keepalives_count": str(keepalives_count),
        }
        self._rows(conn, "configure_beat_session", params)

    def _beat_lock_params(self) -> Params:
        return {"lock_class": ADVISORY_LOCK_CLASS_BEAT, "schema": self.schema}

    def lock_beat(self, conn: psycopg.Connection[Any]) -> bool:
        """Try to take the schema's beat lock for ``conn``'s session; True when held."""
        return bool(self._rows(conn, "lock_beat", self._beat_lock_params())[0]["locked"])

    def unlock_beat(self, conn: psycopg.Connection[Any]) -> bool:
        return bool(self._rows(conn, "unlock_beat", self._beat_lock_params())[0]["unlocked"])

    def load_periodic(self, conn: psycopg.Connection[Any], names: Sequence[str]) -> list[Row]:
        """Rows ``name, processed_until, last_tick, last_job_id, now`` for ``names``."""
        return self._rows(conn, "load_periodic", {"name": list(names)})

    def advance_periodic(
        self,
        conn: psycopg.Connection[Any],
        advances: Sequence[tuple[str, datetime, datetime | None, int | None]],
    ) -> None:
        """Record ``(name, processed_until, last_tick, last_job_id)`` per schedule."""
        params: dict[str, Any] = {}
        for index, column in enumerate(("name", "processed_until", "last_tick", "last_job_id")):
            params[column] = [advance[index] for advance in advances]
        self._rows(conn, "advance_periodic", params)

    def list_periodic(self, conn: psycopg.Connection[Any]) -> list[Row]:
        return self._rows(conn, "list_periodic", None)

    def get_database_time(self, conn: psycopg.Connection[Any]) -> datetime:
        now: datetime = self._rows(conn, "get_database_time", None)[0]["now"]
        return now
