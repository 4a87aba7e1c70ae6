"""LimitQueries: the Store's queries for concurrency and rate limits (``sql/limits.sql``,
migration 0009), one method per named query. Jobs no limit applies to never use them."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import psycopg

from .._jobs import InsertedJob, JobSpec
from .._limits import LimitDefinition
from .base import Params, Row, StoreBase
from .params import job_params, jobs_columns, limit_columns, limit_params


@dataclasses.dataclass
class LimitedClaimReport:
    """What a limited claim (claim_limited, migration flow_control) says besides its jobs.

    ``wait``: seconds until the next rate token that held a job back is due (None when
    no rate did); ``blocked``: the names of the limits that held jobs back for want of
    room; ``error``: the database error that ended the claim (nothing was claimed then).
    """

    wait: float | None = None
    blocked: tuple[str, ...] = ()
    error: str | None = None
    #: The error of the plain claim that followed the limited one in its own round trip
    #: (the limited claim's outcomes and jobs stand; the plain claim is tried again).
    plain_error: str | None = None


def _value(row: Any, name: str) -> Any:
    return row[name] if isinstance(row, dict) else getattr(row, name, None)


def split_limited_rows(rows: list[Any], report: LimitedClaimReport | None) -> list[Any]:
    """The claimed rows of claim_limited without its report row (its last, id NULL),
    whose values (in its meta) go into ``report``."""
    if rows and _value(rows[-1], "id") is None:
        last = rows.pop()  # where claim_limited returns it
    else:
        # Wrapped (an announced claim), the rows may come in another order.
        found = [index for index, row in enumerate(rows) if _value(row, "id") is None]
        if not found:
            return rows
        last = rows.pop(found[0])
    values = _value(last, "meta")
    if report is not None and isinstance(values, dict):
        wait = values.get("wait")
        report.wait = float(wait) if isinstance(wait, (int, float)) else None
        blocked = values.get("blocked")
        report.blocked = tuple(str(name) for name in blocked) if isinstance(blocked, list) else ()
        error = values.get("error")
        report.error = str(error) if error is not None else None
    return rows


def limited_job_params(spec: JobSpec) -> Params:
    return {**job_params(spec), **limit_params(spec)}


def limited_jobs_params(specs: Sequence[JobSpec]) -> Params:
    """Columns of insert_limited_jobs (a batch in which at least one job is limited)."""
    return {**jobs_columns(specs, keys=True), **limit_columns(specs)}


class LimitQueries(StoreBase):
    """Insert limited jobs, claim them within their limits, store and read the limits."""

    # -- enqueue --
    def insert_limited_job(self, conn: psycopg.Connection[Any], spec: JobSpec) -> InsertedJob:
        row = self._rows(conn, "insert_limited_job", limited_job_params(spec), tuples=True)[0]
        return InsertedJob(row[0], row[1])

    async def ainsert_limited_job(
        self, conn: psycopg.AsyncConnection[Any], spec: JobSpec
    ) -> InsertedJob:
        params = limited_job_params(spec)
        row = (await self._arows(conn, "insert_limited_job", params, tuples=True))[0]
        return InsertedJob(row[0], row[1])

    def insert_limited_jobs(
        self, conn: psycopg.Connection[Any], specs: Sequence[JobSpec]
    ) -> list[tuple[Any, ...]]:
        """Rows ``(id, existed)`` in the order of ``specs`` (keys deduplicated by the caller)."""
        return self._rows(
            conn, "insert_limited_jobs", limited_jobs_params(specs), binary=True, tuples=True
        )

    async def ainsert_limited_jobs(
        self, conn: psycopg.AsyncConnection[Any], specs: Sequence[JobSpec]
    ) -> list[tuple[Any, ...]]:
        params = limited_jobs_params(specs)
        return await self._arows(conn, "insert_limited_jobs", params, binary=True, tuples=True)

    # -- claim --
    @staticmethod
    def limited_claim_params(
        worker_id: int,
        queues: Sequence[str] | None,
        limit: int,
        task_names: Sequence[str] | None,
        excluded_queues: Sequence[str] | None,
    ) -> Params:
        return {
            "worker_id": worker_id,
            "queues": list(queues) if queues is not None else None,
            "excluded_queues": list(excluded_queues) if excluded_queues else None,
            "limit": limit,
            "task_names": list(task_names) if task_names is not None else None,
        }

    def claim_limited_jobs(
        self,
        conn: psycopg.Connection[Any],
        *,
        worker_id: int,
        queues: Sequence[str] | None,
        limit: int,
        task_names: Sequence[str] | None = None,
        excluded_queues: Sequence[str] | None = None,
    ) -> list[Row]:
        """The limited claim of the previous release (migration 0009), kept for its
        workers during a rolling upgrade; this release claims with :meth:`claim_limited`."""
        params = self.limited_claim_params(worker_id, queues, limit, task_names, excluded_queues)
        return self._rows(conn, "claim_limited_jobs", params)

    def claim_limited(
        self,
        conn: psycopg.Connection[Any],
        *,
        worker_id: int,
        queues: Sequence[str] | None,
        limit: int,
        task_names: Sequence[str] | None = None,
        excluded_queues: Sequence[str] | None = None,
        report: LimitedClaimReport | None = None,
    ) -> list[Row]:
        """Claim up to ``limit`` due jobs that limits apply to, within the limits; what
        held jobs back (or the error that ended the claim) goes into ``report``."""
        params = self.limited_claim_params(worker_id, queues, limit, task_names, excluded_queues)
        return split_limited_rows(self._rows(conn, "claim_limited", params), report)

    # -- definitions --
    def upsert_limits(
        self, conn: psycopg.Connection[Any], definitions: Sequence[LimitDefinition]
    ) -> int:
        """Store ``definitions``; returns how many limits are stored in all."""
        columns = ("name", "concurrency", "rate_count", "rate_period", "burst")
        params: dict[str, Any] = {column: [] for column in columns}
        for definition in definitions:
            for column, value in zip(columns, definition.as_params(), strict=True):
                params[column].append(value)
        return int(self._rows(conn, "upsert_limits", params)[0]["stored"])

    def get_limits(self, conn: psycopg.Connection[Any]) -> list[Row]:
        return self._rows(conn, "get_limits", None)

    def get_limit_usage(self, conn: psycopg.Connection[Any]) -> list[Row]:
        return self._rows(conn, "get_limit_usage", None)

    def get_limit_top_keys(self, conn: psycopg.Connection[Any], per_limit: int = 10) -> list[Row]:
        return self._rows(conn, "get_limit_top_keys", {"per_limit": per_limit})
