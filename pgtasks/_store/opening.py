"""Opening a store's pools and waiting for their connections: a server that refuses
connections is down within about a second, not after ``connect_timeout``; and
psycopg_pool's own lines about failed connections of pgtasks' pools go to debug, behind
pgtasks' one error that says what to do.

psycopg_pool retries a failed connection in the background (after 1 s, then 2 s, 4 s…),
and ``open(wait=True)`` or ``getconn(timeout)`` wait for a connection until their timeout:
a refused connection (the server is down, a wrong port or password) would take the whole
``connect_timeout`` to report, with a warning per retry. :func:`open_pool` and
:func:`getconn` watch the pool instead: once it has failed to connect, a direct
connection (the probe) says whether the server refuses. A server that keeps refusing for
DOWN_AFTER seconds is down: the wait ends with the probe's error (the caller raises
DatabaseUnavailableError). A restart shorter than that is waited out, and a server that is
slow to answer, or a pool that is merely busy, is never called down: without a failed
attempt of the pool nothing is probed and the whole ``connect_timeout`` is waited.

A server that accepts the probe while the pool, which failed, still gives no connection
BEHIND_AFTER seconds later (psycopg_pool's reconnection backs off: 1 s, 2 s, 4 s …) is
served by a new pool (:func:`take`; the old one is closed with :func:`retire`): after a
failover or a long restart, callers connect again as soon as the server accepts, not
when the backoff ends.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolClosed, PoolTimeout

logger = logging.getLogger("pgtasks.db")

#: Names of pgtasks' pools start with this (Database.name).
POOL_PREFIX = "pgtasks-"
#: The first pauses between looks at an opening pool, and the longest.
FIRST_PAUSE, LONGEST_PAUSE = 0.0005, 0.02
#: A server that refused every probe for this long is down.
DOWN_AFTER = 1.0
#: Probes of a server that refuses are this far apart at least.
PROBE_EVERY = 0.2
#: How long a caller waits for a pooled connection between looks at the pool.
FIRST_WAIT = 0.25
#: A pool that gave no connection this long after the server accepted a direct one is
#: behind: its reconnection attempts wait out psycopg_pool's backoff (1 s, 2 s, 4 s … after
#: each failure), so after an outage of a minute the pool would connect again up to a
#: minute after the server is back (a failover: the new primary accepts at once).
BEHIND_AFTER = 0.5

Probe = Callable[[], "BaseException | None"]
AnyPool = ConnectionPool[Any] | AsyncConnectionPool[Any]


class Refused(PoolTimeout):
    """No pooled connection: the pool's attempts failed and the server refused direct
    connections too for DOWN_AFTER seconds (``cause``: the last refusal)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class Behind(PoolTimeout):
    """The server accepts connections, but the pool has given none BEHIND_AFTER seconds
    later (its reconnection attempts back off), or it was closed meanwhile (renewed by
    another thread): the caller takes a connection from a new pool."""


class RefusalWatch:
    """Whether a pool's server refuses connections, and since when."""

    def __init__(self, pool: AnyPool, probe: Probe, *, short: bool = False) -> None:
        """``short``: the pool's failures so far count when it holds fewer connections
        than its max_size (it is reconnecting, not busy)."""
        self.pool, self.probe = pool, probe
        stats = pool.get_stats()
        reconnecting = short and stats.get("pool_size", 0) < pool.max_size
        self.seen = 0 if reconnecting else stats.get("connections_errors", 0)
        self.since: float | None = None
        self.probed_at = 0.0
        #: When a probe last found the server accepting connections.
        self.accepted_at: float | None = None

    def needs_probe(self) -> bool:
        """The pool failed to connect since the last look, or the server was refusing."""
        if time.monotonic() - self.probed_at < PROBE_EVERY:
            return False
        errors = self.pool.get_stats().get("connections_errors", 0)
        failed, self.seen = errors > self.seen, errors
        return failed or self.since is not None

    def refused(self) -> BaseException | None:
        """Probe: the refusal once the server has refused for DOWN_AFTER seconds."""
        self.probed_at = now = time.monotonic()
        refusal = self.probe()
        if refusal is None:
            self.since = None
            self.accepted_at = self.accepted_at or now
            return None
        if self.since is None:
            self.since = now
        return refusal if time.monotonic() - self.since >= DOWN_AFTER else None

    def behind(self) -> bool:
        """The server accepted a direct connection BEHIND_AFTER seconds ago or more."""
        return self.accepted_at is not None and (
            time.monotonic() - self.accepted_at >= BEHIND_AFTER
        )


def _ready(pool: AnyPool) -> bool:
    """Whether the pool holds its ``min_size`` connections."""
    return bool(pool.get_stats().get("pool_available", 0) >= pool.min_size)


def open_pool(pool: ConnectionPool[Any], timeout: float, probe: Probe) -> BaseException | None:
    """Open ``pool`` and wait for its first connection(s): None when ready; else, with the
    pool closed, the probe's error (the server refuses connections) or a PoolTimeout."""
    pool.open(wait=False)
    watch = RefusalWatch(pool, probe)
    deadline = time.monotonic() + timeout
    pause = FIRST_PAUSE
    while not _ready(pool):
        refusal = watch.refused() if watch.needs_probe() else None
        left = deadline - time.monotonic()
        if refusal is not None or left <= 0:
            pool.close(timeout=0)
            return refusal or PoolTimeout(f"pool initialization incomplete after {timeout:g} sec")
        time.sleep(min(pause, left))
        pause = min(pause * 2, LONGEST_PAUSE)
    return None


async def aopen_pool(
    pool: AsyncConnectionPool[Any], timeout: float, probe: Probe
) -> BaseException | None:
    """:func:`open_pool` of an async pool (the probe runs in a thread)."""
    await pool.open(wait=False)
    watch = RefusalWatch(pool, probe)
    deadline = time.monotonic() + timeout
    pause = FIRST_PAUSE
    while not _ready(pool):
        refusal = await asyncio.to_thread(watch.refused) if watch.needs_probe() else None
        left = deadline - time.monotonic()
        if refusal is not None or left <= 0:
            await pool.close(timeout=0)
            return refusal or PoolTimeout(f"pool initialization incomplete after {timeout:g} sec")
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, LONGEST_PAUSE)
    return None


def getconn(pool: ConnectionPool[Any], timeout: float, probe: Probe) -> Any:
    """``pool.getconn(timeout)``, except that a server which went down after the pool
    opened is :class:`Refused` within about DOWN_AFTER seconds, and a pool that lags a
    server that is back is :class:`Behind` (a free connection is taken at once: one call,
    as before)."""
    started = time.monotonic()
    try:
        return pool.getconn(timeout=min(timeout, FIRST_WAIT))
    except PoolTimeout:
        pass
    except PoolClosed as error:
        raise Behind(str(error)) from None
    watch = RefusalWatch(pool, probe, short=True)
    while True:
        if watch.needs_probe():
            refusal = watch.refused()
            if refusal is not None:
                raise Refused(refusal)
        if watch.behind():
            raise Behind("the server accepts connections; the pool's attempts back off")
        left = started + timeout - time.monotonic()
        if left <= 0:
            raise PoolTimeout(f"couldn't get a connection after {timeout:g} sec")
        try:
            return pool.getconn(timeout=min(left, FIRST_WAIT))
        except PoolTimeout:
            pass
        except PoolClosed as error:
            raise Behind(str(error)) from None


def take(
    current: Callable[[], ConnectionPool[Any]],
    renew: Callable[[ConnectionPool[Any]], ConnectionPool[Any]],
    timeout: float,
    probe: Probe,
) -> tuple[ConnectionPool[Any], Any]:
    """A connection of the ``current()`` pool and that pool; a pool :class:`Behind` is
    replaced by ``renew(pool)`` (once) and the connection taken from the new one."""
    pool = current()
    try:
        return pool, getconn(pool, timeout, probe)
    except Behind:
        pool = renew(pool)
        return pool, getconn(pool, timeout, probe)


def retire(pool: AnyPool) -> None:
    """Close a replaced sync pool in the background: connections still out are closed when
    they come back, and its waiting clients get PoolClosed (so :class:`Behind`)."""
    if isinstance(pool, ConnectionPool):
        threading.Thread(
            target=pool.close, kwargs={"timeout": 1.0}, name="pgtasks-pool-retire", daemon=True
        ).start()


async def agetconn(pool: AsyncConnectionPool[Any], timeout: float, probe: Probe) -> Any:
    """:func:`getconn` of an async pool (the probe runs in a thread)."""
    started = time.monotonic()
    try:
        return await pool.getconn(timeout=min(timeout, FIRST_WAIT))
    except PoolTimeout:
        pass
    except PoolClosed as error:
        raise Behind(str(error)) from None
    watch = RefusalWatch(pool, probe, short=True)
    while True:
        if watch.needs_probe():
            refusal = await asyncio.to_thread(watch.refused)
            if refusal is not None:
                raise Refused(refusal)
        if watch.behind():
            raise Behind("the server accepts connections; the pool's attempts back off")
        left = started + timeout - time.monotonic()
        if left <= 0:
            raise PoolTimeout(f"couldn't get a connection after {timeout:g} sec")
        try:
            return await pool.getconn(timeout=min(left, FIRST_WAIT))
        except PoolTimeout:
            pass
        except PoolClosed as error:
            raise Behind(str(error)) from None


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
