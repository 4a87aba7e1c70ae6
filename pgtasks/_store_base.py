"""StoreBase: statement rendering and the two thin executors (sync and async).

The Store (``_store.py``) and its per-area query mixins (``_store_*.py``) build on it;
no other module runs SQL.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.rows import dict_row

from ._errors import SchemaNotMigratedError
from .sql import load_queries

Params = Mapping[str, Any]
Row = dict[str, Any]

#: First key of every advisory lock pgtasks takes ("pgtk"); the second is per purpose.
ADVISORY_LOCK_CLASS_MIGRATE = 0x7067746B
#: First key of the beat leader lock (a session lock on beat's own connection).
ADVISORY_LOCK_CLASS_BEAT = 0x70677462


def notification_channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel of a schema's jobs."""
    return f"pgtasks.{schema}"


@contextlib.contextmanager
def translate_errors(schema: str) -> Iterator[None]:
    """Turn "relation does not exist"-style errors into an actionable SchemaNotMigratedError."""
    try:
        yield
    except (
        pg_errors.UndefinedTable,
        pg_errors.InvalidSchemaName,
        pg_errors.UndefinedColumn,
        pg_errors.UndefinedFunction,
    ) as error:
        raise SchemaNotMigratedError(
            f"the pgtasks schema {schema!r} is missing or out of date"
            f" ({error.diag.message_primary}):"
            " run `pgtasks migrate -A module:app` (or app.migrate())"
        ) from error


class StoreBase:
    """Rendered statements of one schema, and how to run them."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.channel = notification_channel(schema)
        #: Finished jobs (payload "id,id,…"): result waiters listen here.
        self.done_channel = f"{self.channel}.done"
        #: Cancellation requests for running jobs (payload: the id): workers listen here.
        self.cancel_channel = f"{self.channel}.cancel"
        self._identifier = sql.Identifier(schema)
        self._statements: dict[str, bytes] = {
            name: self._render(query.text) for name, query in load_queries().items()
        }

    def _render(self, text: str) -> bytes:
        composed = sql.SQL(text).format(
            schema=self._identifier,
            channel=sql.Literal(self.channel),
            done_channel=sql.Literal(self.done_channel),
            cancel_channel=sql.Literal(self.cancel_channel),
        )
        return composed.as_string(None).encode()

    # -- executors --
    def _rows(self, conn: psycopg.Connection[Any], name: str, params: Params | None) -> list[Row]:
        with translate_errors(self.schema), conn.cursor(row_factory=dict_row) as cursor:
            cursor.execute(self._statements[name], params)
            return cursor.fetchall() if cursor.description is not None else []

    async def _arows(
        self, conn: psycopg.AsyncConnection[Any], name: str, params: Params | None
    ) -> list[Row]:
        with translate_errors(self.schema):
            async with conn.cursor(row_factory=dict_row) as cursor:
                await cursor.execute(self._statements[name], params)
                return await cursor.fetchall() if cursor.description is not None else []
