"""LimitQueries: queries for concurrency and rate limits (``sql/limits.sql``), one
method per named query; the limited claim is a claim like the others (claims.py). Jobs no
limit applies to never use them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from .._jobs import InsertedJob, JobSpec
from .._limits import LimitDefinition
from .base import Params, QueriesBase, Row
from .params import job_params, jobs_columns, limit_columns, limit_params


def limited_job_params(spec: JobSpec) -> Params:
    return {**job_params(spec), **limit_params(spec)}


def limited_jobs_params(specs: Sequence[JobSpec]) -> Params:
    """Columns of insert_limited_jobs (a batch in which at least one job is limited)."""
    return {**jobs_columns(specs, keys=True), **limit_columns(specs)}


class LimitQueries(QueriesBase):
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

    def get_limit_bad_values(self, conn: psycopg.Connection[Any]) -> list[str]:
        """Names of the stored limits whose values break the table's checks."""
        return list(self._rows(conn, "get_limit_bad_values", None)[0]["names"])
