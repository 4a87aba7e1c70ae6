"""An index built online on a partitioned table (a migration's ``concurrently`` step on
``jobs_history``): PostgreSQL builds no index CONCURRENTLY on a partitioned table, so the
migrator takes its documented way round, step by step:

1. ``CREATE INDEX name ON ONLY <table> …``: the index of the partitioned table alone,
   invalid, a catalog change (in a short transaction under ``lock_timeout``, retried);
2. for each partition, parents first: a partitioned one gets its own index ``ON ONLY``
   the same way; a leaf gets its index built ``CONCURRENTLY`` (reads and writes go on);
   each is then attached to its parent's index (``ALTER INDEX … ATTACH PARTITION``, a
   catalog change); once every partition's is attached the index is valid.

Partition indexes are named by PostgreSQL (as a plain ``CREATE INDEX`` on the table
names them). A run stopped in the middle resumes: an index attached already is kept, one
of the same definition left unattached is attached when valid and built again when
invalid. No day partition is made or dropped meanwhile: that takes the migration lock the
migrator holds. No I/O but through MigrationQueries.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from typing import Any

import psycopg

from .queries import Queries

logger = logging.getLogger("pgtasks.migrate")

_STATEMENT = re.compile(
    r"^CREATE\s+(?P<unique>UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(?:IF\s+NOT\s+EXISTS\s+)?"
    r"(?P<index>\w+)\s+ON\s+(?:\{schema\}\.)?(?P<table>\w+)\s+(?P<rest>.*?);?\s*$",
    re.IGNORECASE | re.DOTALL,
)

#: Runs a callable in a transaction under the migrator's lock_timeout, retried.
InTransaction = Callable[[Callable[[], object]], None]


def partitioned_table(queries: Queries, conn: psycopg.Connection[Any], statement: str) -> bool:
    """Whether ``statement`` (a CREATE INDEX CONCURRENTLY) is on a partitioned table."""
    match = _STATEMENT.match(statement.strip())
    return match is not None and bool(queries.get_partitions(conn, match["table"]))


def build(
    queries: Queries,
    conn: psycopg.Connection[Any],
    statement: str,
    in_transaction: InTransaction,
) -> None:
    """Build the index of ``statement`` on its partitioned table, online (see above)."""
    match = _STATEMENT.match(statement.strip())
    if match is None:
        raise ValueError(f"not a CREATE INDEX CONCURRENTLY statement: {statement[:200]!r}")
    unique = "UNIQUE " if match["unique"] else ""
    rest = match["rest"].replace("{", "{{").replace("}", "}}")
    table, index = match["table"], match["index"]
    in_transaction(
        lambda: queries.run_index_sql(
            conn,
            f"CREATE {unique}INDEX IF NOT EXISTS {{index}} ON ONLY {{schema}}.{{table}} {rest}",
            index=index,
            table=table,
        )
    )
    [definition] = [
        row["definition"] for row in queries.get_table_indexes(conn, table) if row["name"] == index
    ]
    index_of = {table: index}
    for partition in queries.get_partitions(conn, table):
        name, parent = partition["name"], partition["parent"]
        found = _attached(queries, conn, name, index_of[parent])
        if found is None:
            found = _same(queries, conn, name, definition, leaf=partition["leaf"])
            if found is None:
                template = (
                    f"CREATE {unique}INDEX CONCURRENTLY ON {{schema}}.{{table}} {rest}"
                    if partition["leaf"]
                    else f"CREATE {unique}INDEX ON ONLY {{schema}}.{{table}} {rest}"
                )
                build_one = functools.partial(queries.run_index_sql, conn, template, table=name)
                if partition["leaf"]:
                    build_one()
                else:
                    in_transaction(build_one)
                found = _same(queries, conn, name, definition, leaf=partition["leaf"])
                if found is None:
                    raise RuntimeError(f"the index built on {name} for {index} is not found")
            in_transaction(
                functools.partial(
                    queries.run_index_sql,
                    conn,
                    "ALTER INDEX {schema}.{parent} ATTACH PARTITION {schema}.{child}",
                    parent=index_of[parent],
                    child=found,
                )
            )
            logger.info("index %s: %s built and attached on %s", index, found, name)
        index_of[name] = found


def _attached(
    queries: Queries, conn: psycopg.Connection[Any], table: str, parent: str
) -> str | None:
    for row in queries.get_table_indexes(conn, table):
        if row["attached_to"] == parent:
            return str(row["name"])
    return None


def _same(
    queries: Queries, conn: psycopg.Connection[Any], table: str, definition: str, *, leaf: bool
) -> str | None:
    """An unattached index of ``table`` with ``definition``: a valid one (or, on a
    partitioned table, any); an invalid one of a leaf (a build that did not finish) is
    dropped, to be built again."""
    for row in queries.get_table_indexes(conn, table):
        if row["attached_to"] is not None or row["definition"] != definition:
            continue
        if row["valid"] or not leaf:
            return str(row["name"])
        logger.warning(
            "index %s on %s was left invalid by a build that did not finish;"
            " dropping it (concurrently) and building it again",
            row["name"],
            table,
        )
        queries.run_index_sql(
            conn, "DROP INDEX CONCURRENTLY IF EXISTS {schema}.{index}", index=row["name"]
        )
    return None
