"""IdentityQueries: a store's identity (``sql/identity.sql``): its
number and uid, the renumbering of a store that issued no id yet, the check that a
caller's connection belongs to the store, and the unfinished jobs by queue."""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg
from psycopg import sql

from .base import QueriesBase, Row

#: Ids of store N lie in [N << ID_BITS, (N + 1) << ID_BITS).
ID_BITS = 48
#: The tables whose identity gives out ids that name their store.
_ID_TABLES = ("jobs", "workflows")


@dataclasses.dataclass(frozen=True)
class StoreIdentity:
    """What ``migrate`` wrote in a store: its number, its uid, and whether it issued ids."""

    number: int
    uid: str
    issued_ids: bool


class IdentityQueries(QueriesBase):
    """Read and set the store's identity."""

    def get_store_identity(self, conn: psycopg.Connection[Any]) -> StoreIdentity:
        row = self._rows(conn, "get_store_identity", None)[0]
        return StoreIdentity(row["store_no"], row["uid"], bool(row["issued_ids"]))

    async def aget_store_identity(self, conn: psycopg.AsyncConnection[Any]) -> StoreIdentity:
        row = (await self._arows(conn, "get_store_identity", None))[0]
        return StoreIdentity(row["store_no"], row["uid"], bool(row["issued_ids"]))

    def lock_store_identity(self, conn: psycopg.Connection[Any]) -> bool:
        """Lock the identity row (in the caller's transaction); whether ids were issued."""
        return bool(self._rows(conn, "lock_store_identity", None)[0]["issued_ids"])

    def set_store_number(self, conn: psycopg.Connection[Any], number: int) -> None:
        """Write ``number`` and restart the sequences at ``number << 48``, ending before
        the next store's ids (in the caller's transaction)."""
        self._rows(conn, "set_store_number", {"store_no": number})
        first = max(number << ID_BITS, 1)
        last = ((number + 1) << ID_BITS) - 1
        bounds = [sql.Literal(value) for value in (first, last, first, first)]
        for table in _ID_TABLES:
            sequence = sql.Identifier(self.schema, f"{table}_id_seq")
            conn.execute(
                sql.SQL(
                    "ALTER SEQUENCE {} MINVALUE {} MAXVALUE {} START WITH {} RESTART WITH {}"
                ).format(sequence, *bounds)
            )

    def renumber_store(self, conn: psycopg.Connection[Any], number: int) -> bool:
        """Give the store ``number`` in one transaction; False, changing nothing, when it
        issued an id meanwhile."""
        with conn.transaction():
            self.lock_migrations(conn)  # never while a migrator changes the schema
            if self.lock_store_identity(conn):
                return False
            self.set_store_number(conn, number)
        return True

    def has_store_identity(self, conn: psycopg.Connection[Any]) -> bool:
        table = f"{self._identifier.as_string(None)}.instance"
        return bool(self._rows(conn, "has_store_identity", {"table": table})[0]["present"])

    async def ahas_store_identity(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        table = f"{self._identifier.as_string(None)}.instance"
        return bool((await self._arows(conn, "has_store_identity", {"table": table}))[0]["present"])

    def get_store_uid(self, conn: psycopg.Connection[Any]) -> str:
        return str(self._rows(conn, "get_store_uid", None)[0]["uid"])

    async def aget_store_uid(self, conn: psycopg.AsyncConnection[Any]) -> str:
        return str((await self._arows(conn, "get_store_uid", None))[0]["uid"])

    def get_connection_store_uid(self, conn: psycopg.Connection[Any]) -> str | None:
        """The uid of this schema's store as ``conn`` sees it (None: no such schema there);
        reads only, and never fails on a missing table (a caller's transaction goes on)."""
        return self.get_store_uid(conn) if self.has_store_identity(conn) else None

    async def aget_connection_store_uid(self, conn: psycopg.AsyncConnection[Any]) -> str | None:
        return await self.aget_store_uid(conn) if await self.ahas_store_identity(conn) else None

    def count_stranded_jobs(self, conn: psycopg.Connection[Any]) -> list[Row]:
        """Rows ``queue, jobs`` of the waiting, pending and running jobs."""
        return self._rows(conn, "count_stranded_jobs", None)
