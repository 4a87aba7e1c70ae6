"""InsertQueries: enqueue paths (``sql/inserts.sql``): one job, a batch by
arrays, delay_many's batch, a large batch by COPY; limited and scoped jobs go to their own
queries (limits.py, unique.py)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import psycopg
from psycopg.errors import UniqueViolation
from psycopg.pq import PipelineStatus

from .._jobs import DebouncedJobSpec, InsertedJob, JobBatch, JobSpec, ScopedJobSpec
from .base import Params, own_transaction
from .debounce import DebounceQueries, is_debounced
from .limits import LimitQueries
from .params import batch_params, copy_chunks, job_params, jobs_columns
from .unique import UniqueQueries, aatomic, atomic, is_life_key_conflict

#: Batches of at least this many plain jobs go by COPY (Queries.copy_new_jobs): two round
#: trips instead of one, but for many jobs far less work for both ends than the arrays of
#: insert_new_jobs (measured by benchmarks/enqueue.py).
COPY_MIN_JOBS = 64
#: Rows per INSERT statement in bulk enqueues (several statements share one transaction).
BULK_CHUNK = 5000


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


class InsertQueries(DebounceQueries, LimitQueries, UniqueQueries):
    """Insert jobs: one, a batch, delay_many's batch; an existing idempotency key answers
    with its job."""

    @staticmethod
    def _job_params(spec: JobSpec) -> Params:
        """Parameters of ``insert_job`` / ``insert_new_job`` (the latter ignores the key)."""
        return job_params(spec)

    def insert_job(self, conn: psycopg.Connection[Any], spec: JobSpec) -> InsertedJob:
        """Insert one job; an existing idempotency key answers with its job."""
        if isinstance(spec, DebouncedJobSpec):
            return self.insert_debounced_job(conn, spec)
        if isinstance(spec, ScopedJobSpec):
            return self.insert_scoped_jobs(conn, [spec])[0]
        if spec.limit_groups is not None:
            return self.insert_limited_job(conn, spec)
        if spec.idempotency_key is None:
            if own_transaction(conn):
                return InsertedJob(self.insert_and_notify_job(conn, spec), False)
            return InsertedJob(self.insert_new_job(conn, spec), False)
        params = self._job_params(spec)
        try:
            row = self._rows(conn, "insert_job", params, tuples=True)[0]
        except UniqueViolation as error:
            # The key's job was enqueued, ran and finished while this statement waited
            # (its key left jobs for job_keys): once more, it is
            # answered from job_keys. Inside the caller's transaction the error stands.
            if not (is_life_key_conflict(error) and own_transaction(conn)):
                raise
            row = self._rows(conn, "insert_job", params, tuples=True)[0]
        return InsertedJob(row[0], row[1])

    async def ainsert_job(self, conn: psycopg.AsyncConnection[Any], spec: JobSpec) -> InsertedJob:
        if isinstance(spec, DebouncedJobSpec):
            return await self.ainsert_debounced_job(conn, spec)
        if isinstance(spec, ScopedJobSpec):
            return (await self.ainsert_scoped_jobs(conn, [spec]))[0]
        if spec.limit_groups is not None:
            return await self.ainsert_limited_job(conn, spec)
        if spec.idempotency_key is None:
            if own_transaction(conn):
                return InsertedJob(await self.ainsert_and_notify_job(conn, spec), False)
            return InsertedJob(await self.ainsert_new_job(conn, spec), False)
        params = self._job_params(spec)
        try:
            row = (await self._arows(conn, "insert_job", params, tuples=True))[0]
        except UniqueViolation as error:
            if not (is_life_key_conflict(error) and own_transaction(conn)):
                raise
            row = (await self._arows(conn, "insert_job", params, tuples=True))[0]
        return InsertedJob(row[0], row[1])

    def insert_and_notify_job(self, conn: psycopg.Connection[Any], spec: JobSpec) -> int:
        """The id of a new job for a spec without an idempotency key, inserted by a
        statement that is a transaction of its own (see ``own_transaction``): it notifies
        by itself and switches the notify trigger off until its commit.
        """
        params = {**self._job_params(spec), **self.notifications.params(spec.queue)}
        row = self._rows(conn, "insert_and_notify_job", params, tuples=True)[0]
        self.notifications.sent(spec.queue, row[1])
        return int(row[0])

    async def ainsert_and_notify_job(
        self, conn: psycopg.AsyncConnection[Any], spec: JobSpec
    ) -> int:
        params = {**self._job_params(spec), **self.notifications.params(spec.queue)}
        row = (await self._arows(conn, "insert_and_notify_job", params, tuples=True))[0]
        self.notifications.sent(spec.queue, row[1])
        return int(row[0])

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
        sent, answer = InsertQueries._unique_specs(specs)
        params = dict(InsertQueries._new_jobs_params(sent))
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

    def insert_jobs_in_chunks(
        self, conn: psycopg.Connection[Any], specs: Sequence[JobSpec]
    ) -> list[InsertedJob]:
        """insert_jobs, BULK_CHUNK rows a statement, every statement in one transaction."""
        if len(specs) <= BULK_CHUNK:
            return self.insert_jobs(conn, specs)
        inserted: list[InsertedJob] = []
        with conn.transaction():
            for start in range(0, len(specs), BULK_CHUNK):
                inserted += self.insert_jobs(conn, specs[start : start + BULK_CHUNK])
        return inserted

    async def ainsert_jobs_in_chunks(
        self, conn: psycopg.AsyncConnection[Any], specs: Sequence[JobSpec]
    ) -> list[InsertedJob]:
        if len(specs) <= BULK_CHUNK:
            return await self.ainsert_jobs(conn, specs)
        inserted: list[InsertedJob] = []
        async with conn.transaction():
            for start in range(0, len(specs), BULK_CHUNK):
                inserted += await self.ainsert_jobs(conn, specs[start : start + BULK_CHUNK])
        return inserted

    def insert_jobs(
        self, conn: psycopg.Connection[Any], specs: Sequence[JobSpec]
    ) -> list[InsertedJob]:
        """Insert jobs in order; an existing idempotency key answers with its job."""
        if len(specs) == 1:
            return [self.insert_job(conn, specs[0])]
        if type(specs) is JobBatch:
            return self.insert_batch_jobs(conn, specs)
        if is_debounced(specs):  # one by one (each takes its key's lock), in one transaction
            with atomic(conn):
                return [self.insert_job(conn, spec) for spec in specs]
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
        if is_debounced(specs):
            async with aatomic(conn):
                return [await self.ainsert_job(conn, spec) for spec in specs]
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
