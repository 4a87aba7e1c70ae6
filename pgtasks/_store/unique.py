"""UniqueQueries: enqueues of jobs with a uniqueness scope (``sql/unique.sql``),
one statement per scope.

A batch may mix scopes; each scope's jobs go in one statement (one ON CONFLICT target
each), all in one transaction. A key repeated within a batch is sent once and answers
its later copies as existing; keys are sent in sorted order, so concurrent batches of
overlapping keys lock them in one order (no deadlock). A job that also carries a key
for life (beat's tick key) is inserted on its own: if its tick key exists already, the
key-for-life statement answers with that job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager, nullcontext
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.errors import UniqueViolation
from psycopg.pq import TransactionStatus

from .._jobs import InsertedJob, JobSpec, ScopedJobSpec
from .base import Params, Row
from .counters import CounterQueries
from .params import jobs_columns, limit_columns

#: The constraint of keys for life.
LIFE_KEY_CONSTRAINT = "jobs_idempotency_key_key"
#: The index of keys unique while active.
ACTIVE_KEY_INDEX = "jobs_unique_active_idx"

_JOB_FIELDS = tuple(field.name for field in dataclasses.fields(JobSpec))


def partition(specs: Sequence[JobSpec]) -> tuple[list[int], list[int]]:
    """Positions of the plain specs and of the scoped specs."""
    plain: list[int] = []
    scoped: list[int] = []
    for index, spec in enumerate(specs):
        (scoped if isinstance(spec, ScopedJobSpec) else plain).append(index)
    return plain, scoped


def merge(size: int, parts: Sequence[tuple[list[int], list[InsertedJob]]]) -> list[InsertedJob]:
    """Results back in the order of the specs they answer."""
    results: list[InsertedJob | None] = [None] * size
    for positions, inserted in parts:
        for position, job in zip(positions, inserted, strict=True):
            results[position] = job
    return [job for job in results if job is not None]


def atomic(conn: psycopg.Connection[Any]) -> AbstractContextManager[Any]:
    """A block whose statements commit together: a transaction on an idle autocommit
    connection; otherwise the transaction in progress (or the implicit one of a
    non-autocommit connection) holds them already.
    """
    if conn.autocommit and conn.pgconn.transaction_status == TransactionStatus.IDLE:
        return conn.transaction()
    return nullcontext()


def aatomic(conn: psycopg.AsyncConnection[Any]) -> AbstractAsyncContextManager[Any]:
    if conn.autocommit and conn.pgconn.transaction_status == TransactionStatus.IDLE:
        return conn.transaction()
    return nullcontext()


#: A scoped key's identity within a batch: the key, and the period (zero: while active).
Identity = tuple[str, timedelta]


@dataclasses.dataclass
class _Plan:
    """What to send for a batch of scoped specs."""

    #: (statement, params, answer: for every spec of the group, its row in the result)
    groups: Sequence[tuple[str, Params, list[int], list[int]]]
    #: Positions of specs that also carry a key for life: inserted one by one.
    singles: list[int]

    @property
    def repeated(self) -> int:
        """Specs whose key an earlier spec of the same group holds (sent once)."""
        return sum(len(answer) - len(params["task_name"]) for _, params, _, answer in self.groups)


def _columns(specs: Sequence[ScopedJobSpec]) -> dict[str, Any]:
    return {
        **jobs_columns(specs, keys=True),
        "unique_key": [spec.unique_key for spec in specs],
        **limit_columns(specs),
    }


def plan(specs: Sequence[JobSpec]) -> _Plan:
    """Group scoped specs by scope, each key once per group (a period's key with its
    period: the window is computed from one now() for the whole statement), sorted by
    key: concurrent batches then lock their keys in one order and never deadlock.
    """
    singles: list[int] = []
    by_scope: dict[bool, tuple[list[int], list[Identity], dict[Identity, ScopedJobSpec]]] = {}
    for position, spec in enumerate(specs):
        if not isinstance(spec, ScopedJobSpec):
            raise TypeError(f"not a scoped job: {spec!r}")
        if spec.idempotency_key is not None:
            singles.append(position)
            continue
        periodic = spec.unique_for is not None
        positions, identities, first = by_scope.setdefault(periodic, ([], [], {}))
        identity = (spec.unique_key, spec.unique_for or timedelta(0))
        positions.append(position)
        identities.append(identity)
        first.setdefault(identity, spec)
    groups = []
    for periodic, (positions, identities, first) in sorted(by_scope.items()):
        order = sorted(first)
        row_of = {identity: row for row, identity in enumerate(order)}
        sent = [first[identity] for identity in order]
        params = _columns(sent)
        if periodic:
            params["unique_for"] = [spec.unique_for for spec in sent]
        name = "insert_period_jobs" if periodic else "insert_active_jobs"
        groups.append((name, params, positions, [row_of[identity] for identity in identities]))
    return _Plan(groups, singles)


def answers(rows: list[tuple[Any, ...]], answer: list[int]) -> list[InsertedJob]:
    """One InsertedJob per spec; a key's copies after the first found it existing."""
    results: list[InsertedJob] = []
    seen: set[int] = set()
    for row_index in answer:
        row = rows[row_index]
        results.append(InsertedJob(row[0], bool(row[1]) or row_index in seen))
        seen.add(row_index)
    return results


def is_life_key_conflict(error: UniqueViolation) -> bool:
    return error.diag.constraint_name == LIFE_KEY_CONSTRAINT


class UniqueQueries(CounterQueries):
    """Inserts of scoped jobs, and the holder of a key unique while active."""

    # InsertQueries' (a subclass): the key-for-life insert of one job.
    def insert_job(self, conn: psycopg.Connection[Any], spec: JobSpec) -> InsertedJob:
        raise NotImplementedError

    async def ainsert_job(self, conn: psycopg.AsyncConnection[Any], spec: JobSpec) -> InsertedJob:
        raise NotImplementedError

    # InsertQueries': the insert of a batch (its plain and keyed-for-life part, here).
    def insert_jobs(
        self, conn: psycopg.Connection[Any], specs: Sequence[JobSpec]
    ) -> list[InsertedJob]:
        raise NotImplementedError

    async def ainsert_jobs(
        self, conn: psycopg.AsyncConnection[Any], specs: Sequence[JobSpec]
    ) -> list[InsertedJob]:
        raise NotImplementedError

    def insert_mixed_jobs(
        self, conn: psycopg.Connection[Any], specs: Sequence[JobSpec]
    ) -> list[InsertedJob]:
        """A batch with scoped jobs: one statement per scope (one ON CONFLICT target
        each) and one for the others, in one transaction; answers in order.
        """
        plain, scoped = partition(specs)
        with atomic(conn):
            parts = [(scoped, self.insert_scoped_jobs(conn, [specs[i] for i in scoped]))]
            if plain:
                parts.append((plain, self.insert_jobs(conn, [specs[i] for i in plain])))
        return merge(len(specs), parts)

    async def ainsert_mixed_jobs(
        self, conn: psycopg.AsyncConnection[Any], specs: Sequence[JobSpec]
    ) -> list[InsertedJob]:
        plain, scoped = partition(specs)
        async with aatomic(conn):
            scoped_specs = [specs[i] for i in scoped]
            parts = [(scoped, await self.ainsert_scoped_jobs(conn, scoped_specs))]
            if plain:
                plain_specs = [specs[i] for i in plain]
                parts.append((plain, await self.ainsert_jobs(conn, plain_specs)))
        return merge(len(specs), parts)

    def insert_active_jobs(
        self, conn: psycopg.Connection[Any], params: Params
    ) -> list[tuple[Any, ...]]:
        """Rows ``id, existed`` of jobs unique while active (columns as ``_columns``)."""
        return self._rows(conn, "insert_active_jobs", params, binary=True, tuples=True)

    async def ainsert_active_jobs(
        self, conn: psycopg.AsyncConnection[Any], params: Params
    ) -> list[tuple[Any, ...]]:
        return await self._arows(conn, "insert_active_jobs", params, binary=True, tuples=True)

    def insert_period_jobs(
        self, conn: psycopg.Connection[Any], params: Params
    ) -> list[tuple[Any, ...]]:
        """Rows ``id, existed`` of jobs unique for a period (``_columns`` + unique_for)."""
        return self._rows(conn, "insert_period_jobs", params, binary=True, tuples=True)

    async def ainsert_period_jobs(
        self, conn: psycopg.AsyncConnection[Any], params: Params
    ) -> list[tuple[Any, ...]]:
        return await self._arows(conn, "insert_period_jobs", params, binary=True, tuples=True)

    def _insert_group(
        self, conn: psycopg.Connection[Any], name: str, params: Params
    ) -> list[tuple[Any, ...]]:
        if name == "insert_period_jobs":
            return self.insert_period_jobs(conn, params)
        return self.insert_active_jobs(conn, params)

    async def _ainsert_group(
        self, conn: psycopg.AsyncConnection[Any], name: str, params: Params
    ) -> list[tuple[Any, ...]]:
        if name == "insert_period_jobs":
            return await self.ainsert_period_jobs(conn, params)
        return await self.ainsert_active_jobs(conn, params)

    def insert_scoped_jobs(
        self, conn: psycopg.Connection[Any], specs: Sequence[JobSpec]
    ) -> list[InsertedJob]:
        """Insert ScopedJobSpecs in one transaction; answers in the order of ``specs``."""
        work = plan(specs)
        parts: list[tuple[list[int], list[InsertedJob]]] = []
        repeated = work.repeated
        several = len(work.groups) + len(work.singles) > 1 or repeated
        with atomic(conn) if several else nullcontext():
            for name, params, positions, answer in work.groups:
                rows = self._insert_group(conn, name, params)
                parts.append((positions, answers(rows, answer)))
            for position in work.singles:
                parts.append(([position], [self._insert_with_life_key(conn, specs[position])]))
            self.count_repeated_keys(conn, repeated)
        return merge(len(specs), parts)

    def _insert_with_life_key(self, conn: psycopg.Connection[Any], spec: JobSpec) -> InsertedJob:
        """A scoped job that also has a key for life: when that key exists, its job."""
        name, params, _, _ = _single_group(spec)
        try:
            with conn.transaction():  # a savepoint: the caller's transaction survives
                row = self._insert_group(conn, name, params)[0]
        except UniqueViolation as error:
            if not is_life_key_conflict(error):
                raise
            return self.insert_job(conn, _plain(spec))
        return InsertedJob(row[0], bool(row[1]))

    async def ainsert_scoped_jobs(
        self, conn: psycopg.AsyncConnection[Any], specs: Sequence[JobSpec]
    ) -> list[InsertedJob]:
        work = plan(specs)
        parts: list[tuple[list[int], list[InsertedJob]]] = []
        repeated = work.repeated
        several = len(work.groups) + len(work.singles) > 1 or repeated
        async with aatomic(conn) if several else nullcontext():
            for name, params, positions, answer in work.groups:
                rows = await self._ainsert_group(conn, name, params)
                parts.append((positions, answers(rows, answer)))
            for position in work.singles:
                job = await self._ainsert_with_life_key(conn, specs[position])
                parts.append(([position], [job]))
            await self.acount_repeated_keys(conn, repeated)
        return merge(len(specs), parts)

    async def _ainsert_with_life_key(
        self, conn: psycopg.AsyncConnection[Any], spec: JobSpec
    ) -> InsertedJob:
        name, params, _, _ = _single_group(spec)
        try:
            async with conn.transaction():
                row = (await self._ainsert_group(conn, name, params))[0]
        except UniqueViolation as error:
            if not is_life_key_conflict(error):
                raise
            return await self.ainsert_job(conn, _plain(spec))
        return InsertedJob(row[0], bool(row[1]))

    def get_active_key_holder(self, conn: psycopg.Connection[Any], job_id: int) -> Row | None:
        """``id, status, unique_key`` of the job holding job ``job_id``'s active key."""
        rows = self._rows(conn, "get_active_key_holder", {"id": job_id})
        return rows[0] if rows else None


def _single_group(spec: JobSpec) -> tuple[str, Params, list[int], list[int]]:
    """The statement and parameters of one scoped spec (whatever its keys)."""
    if not isinstance(spec, ScopedJobSpec):
        raise TypeError(f"not a scoped job: {spec!r}")
    params = _columns([spec])
    if spec.unique_for is not None:
        params["unique_for"] = [spec.unique_for]
        return "insert_period_jobs", params, [0], [0]
    return "insert_active_jobs", params, [0], [0]


def _plain(spec: JobSpec) -> JobSpec:
    """The key-for-life part of a scoped spec: a JobSpec of the same fields."""
    return JobSpec(**{name: getattr(spec, name) for name in _JOB_FIELDS})
