"""CounterQueries: queries of the counters of exercised guarantees
(``sql/counters.sql``), one method per named query."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg

from .._counters import ENQUEUES_DEDUPLICATED
from .base import QueriesBase


class CounterQueries(QueriesBase):
    """Add to, read and fold the counters."""

    def add_counters(self, conn: psycopg.Connection[Any], counts: Mapping[str, int]) -> None:
        """Add ``counts`` (name → amount; zeros are skipped)."""
        params = {"name": list(counts), "value": list(counts.values())}
        self._rows(conn, "add_counters", params)

    def get_counters(self, conn: psycopg.Connection[Any]) -> dict[str, int]:
        """Every counter's total, by name."""
        return {row["name"]: int(row["value"]) for row in self._rows(conn, "get_counters", None)}

    def fold_counters(self, conn: psycopg.Connection[Any]) -> None:
        """Fold each counter's rows into one."""
        self._rows(conn, "fold_counters", None)

    def count_repeated_keys(self, conn: psycopg.Connection[Any], repeated: int) -> None:
        """A batch repeated a key ``repeated`` times: each later copy is answered by the
        job the batch inserts for the key (the client sends a key once), so the enqueue
        statement's own count (the counting trigger's) cannot see it; counted here,
        in the batch's transaction."""
        if repeated:
            self.add_counters(conn, {ENQUEUES_DEDUPLICATED: repeated})

    async def acount_repeated_keys(self, conn: psycopg.AsyncConnection[Any], repeated: int) -> None:
        if repeated:
            await self.aadd_counters(conn, {ENQUEUES_DEDUPLICATED: repeated})

    async def aadd_counters(
        self, conn: psycopg.AsyncConnection[Any], counts: Mapping[str, int]
    ) -> None:
        params = {"name": list(counts), "value": list(counts.values())}
        await self._arows(conn, "add_counters", params)
