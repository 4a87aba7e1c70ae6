"""What a database error means for a retry: the connection broke (try on a fresh one),
the statement met a transient condition (try it again), a replica cancelled a read; and
rolling back what a failed operation left open on a pooled connection."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import PoolTimeout

logger = logging.getLogger("pgtasks")


def is_connection_failure(error: BaseException) -> bool:
    """Errors worth a retry on a fresh connection: the connection broke, not the query."""
    if not isinstance(error, psycopg.OperationalError) or isinstance(error, PoolTimeout):
        return False
    state = error.sqlstate
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


#: SQLSTATEs of errors that a later try of the same statement may not meet: a lock wait
#: past lock_timeout (55P03), a statement past statement_timeout (57014), a serialization
#: failure, a deadlock or any other transaction rollback (class 40), a server short of
#: resources (class 53). Nothing the statement wrote stays.
TRANSIENT_STATES = ("55P03", "57014")
TRANSIENT_CLASSES = ("40", "53")


def is_transient(error: BaseException) -> bool:
    """A database error worth trying the same statement again on the same connection."""
    if not isinstance(error, psycopg.Error):
        return False
    state = error.sqlstate or ""
    return state in TRANSIENT_STATES or state[:2] in TRANSIENT_CLASSES


def is_recovery_conflict(error: BaseException) -> bool:
    """A hot standby cancelled the query to apply WAL (``max_standby_streaming_delay``)."""
    return (
        isinstance(error, psycopg.Error)
        and error.sqlstate == "40001"
        and "conflict with recovery" in str(error)
    )


def left_open(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """A transaction is open on ``conn`` (not after an autocommit statement)."""
    status = conn.pgconn.transaction_status
    return status != TransactionStatus.IDLE and status != TransactionStatus.UNKNOWN


def rollback_left_open(conn: psycopg.Connection[Any]) -> None:
    """Roll back what an operation that failed left open (as ``with conn:`` does): a
    connection in a bad state is left to the pool, without hiding the operation's error."""
    if not left_open(conn):
        return
    try:
        conn.rollback()
    except Exception as error:
        logger.warning("error rolling back a pooled connection: %s", error)


async def arollback_left_open(conn: psycopg.AsyncConnection[Any]) -> None:
    if not left_open(conn):
        return
    try:
        await conn.rollback()
    except Exception as error:
        logger.warning("error rolling back a pooled connection: %s", error)
