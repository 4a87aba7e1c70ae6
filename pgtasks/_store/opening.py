"""Opening a store's pools: a server that refuses connections is down at once, not after
``connect_timeout``; and psycopg_pool's own lines about failed connections of pgtasks'
pools go to debug, behind pgtasks' one error that says what to do.

psycopg_pool retries a failed connection in the background (after 1 s, then 2 s, 4 s…),
and ``open(wait=True)`` waits for ``min_size`` connections until its timeout: a refused
connection (the server is down, a wrong port or password) would take the whole
``connect_timeout`` to report, with a warning per retry. :func:`open_pool` opens the pool
without waiting and watches it: ready as soon as its first connection(s) are in; at the
pool's first failed attempt, one direct connection (the probe) says whether the server
refuses (the pool is closed and the probe's error returned: the caller raises
DatabaseUnavailableError at once), or answers (a passing failure: keep waiting). A server
that is slow to answer is never probed early: it has the whole ``connect_timeout``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

logger = logging.getLogger("pgtasks.db")

#: Names of pgtasks' pools start with this (Database.name).
POOL_PREFIX = "pgtasks-"
#: The first pauses between looks at an opening pool, and the longest.
FIRST_PAUSE, LONGEST_PAUSE = 0.0005, 0.02

Probe = Callable[[], "BaseException | None"]


def _ready(pool: ConnectionPool[Any] | AsyncConnectionPool[Any]) -> tuple[bool, int]:
    """Whether the pool holds its ``min_size`` connections, and its failed attempts."""
    stats = pool.get_stats()
    return stats.get("pool_available", 0) >= pool.min_size, stats.get("connections_errors", 0)


def open_pool(pool: ConnectionPool[Any], timeout: float, probe: Probe) -> BaseException | None:
    """Open ``pool`` and wait for its first connection(s): None when ready; else, with the
    pool closed, the probe's error (the server refuses connections) or a PoolTimeout."""
    pool.open(wait=False)
    deadline = time.monotonic() + timeout
    pause, probed = FIRST_PAUSE, 0
    while True:
        ready, errors = _ready(pool)
        if ready:
            return None
        if errors > probed:
            probed = errors
            refused = probe()
            if refused is not None:
                pool.close(timeout=0)
                return refused
        left = deadline - time.monotonic()
        if left <= 0:
            pool.close(timeout=0)
            return PoolTimeout(f"pool initialization incomplete after {timeout:g} sec")
        time.sleep(min(pause, left))
        pause = min(pause * 2, LONGEST_PAUSE)


async def aopen_pool(
    pool: AsyncConnectionPool[Any], timeout: float, probe: Probe
) -> BaseException | None:
    """:func:`open_pool` of an async pool (the probe runs in a thread)."""
    await pool.open(wait=False)
    deadline = time.monotonic() + timeout
    pause, probed = FIRST_PAUSE, 0
    while True:
        ready, errors = _ready(pool)
        if ready:
            return None
        if errors > probed:
            probed = errors
            refused = await asyncio.to_thread(probe)
            if refused is not None:
                await pool.close(timeout=0)
                return refused
        left = deadline - time.monotonic()
        if left <= 0:
            await pool.close(timeout=0)
            return PoolTimeout(f"pool initialization incomplete after {timeout:g} sec")
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, LONGEST_PAUSE)


#: How long a caller waits for a pooled connection before it looks whether the pool's
#: attempts to connect fail (then a direct connection that is refused ends the wait).
FIRST_WAIT = 0.25


class Refused(PoolTimeout):
    """No pooled connection: the pool's attempts failed and the server refused a direct
    connection too (``cause``: that refusal)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def getconn(pool: ConnectionPool[Any], timeout: float, probe: Probe) -> Any:
    """``pool.getconn(timeout)``, except that a server which went down after the pool
    opened is :class:`Refused` at once: after FIRST_WAIT, each time the pool has failed
    to connect again, one direct connection is tried (a pool that is merely busy, with
    no failed attempt, is waited for the whole ``timeout``)."""
    if timeout <= FIRST_WAIT:
        return pool.getconn(timeout=timeout)
    try:
        return pool.getconn(timeout=FIRST_WAIT)  # at once when a connection is free
    except PoolTimeout:
        pass
    deadline = time.monotonic() + timeout - FIRST_WAIT
    probed = 0
    while True:
        errors = pool.get_stats().get("connections_errors", 0)
        if errors > probed:
            probed = errors
            refused = probe()
            if refused is not None:
                raise Refused(refused)
        left = deadline - time.monotonic()
        if left <= 0:
            raise PoolTimeout(f"couldn't get a connection after {timeout:g} sec")
        try:
            return pool.getconn(timeout=min(left, FIRST_WAIT))
        except PoolTimeout:
            continue


async def agetconn(pool: AsyncConnectionPool[Any], timeout: float, probe: Probe) -> Any:
    """:func:`getconn` of an async pool (the probe runs in a thread)."""
    if timeout <= FIRST_WAIT:
        return await pool.getconn(timeout=timeout)
    try:
        return await pool.getconn(timeout=FIRST_WAIT)
    except PoolTimeout:
        pass
    deadline = time.monotonic() + timeout - FIRST_WAIT
    probed = 0
    while True:
        errors = pool.get_stats().get("connections_errors", 0)
        if errors > probed:
            probed = errors
            refused = await asyncio.to_thread(probe)
            if refused is not None:
                raise Refused(refused)
        left = deadline - time.monotonic()
        if left <= 0:
            raise PoolTimeout(f"couldn't get a connection after {timeout:g} sec")
        try:
            return await pool.getconn(timeout=min(left, FIRST_WAIT))
        except PoolTimeout:
            continue


class PoolWarningsToDebug(logging.Filter):
    """psycopg_pool's warnings about connections of pgtasks' pools ("error connecting in
    'pgtasks-…'", "reconnection attempt … failed", "discarding closed connection") are
    logged again at debug under
    ``pgtasks.db``: pgtasks reports the failure itself, once, with what to do (a pool of
    the user's own keeps its warnings)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING or not record.args:
            return True
        args = record.args if isinstance(record.args, tuple) else (record.args,)
        if not any(_of_pgtasks(arg) for arg in args):
            return True
        logger.debug("psycopg_pool: %s", record.getMessage())
        return False


def _of_pgtasks(arg: object) -> bool:
    """A pool name of pgtasks', or a connection of one of its pools."""
    name = arg if isinstance(arg, str) else getattr(getattr(arg, "_pool", None), "name", None)
    return isinstance(name, str) and name.startswith(POOL_PREFIX)


_filter = PoolWarningsToDebug()


def quiet_pool_warnings() -> None:
    """Install the filter on psycopg_pool's logger (once; idempotent)."""
    pool_logger = logging.getLogger("psycopg.pool")
    if _filter not in pool_logger.filters:
        pool_logger.addFilter(_filter)


quiet_pool_warnings()  # pgtasks' pools are made by Database, which imports this
