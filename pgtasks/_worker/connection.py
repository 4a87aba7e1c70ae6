"""A worker's own connections: how they are opened (``connector``) and how each part holds
one (``OwnConnection``: opened on demand, dropped after a failure).

Every part of a worker that talks to the database (the claim loop, the round trips'
lanes, the services, the metrics sampler) holds a connection of its own, never the
App's pool: a task that exhausts or leaks pooled connections cannot stop them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import psycopg

from .._store.database import Database

#: Session settings of a worker's own connections. Queue tables' statistics are always
#: stale (a bulk enqueue of thousands of jobs is "15 rows" until autovacuum analyzes it),
#: so keep the planner on index scans: a stale estimate must never turn the claim into a
#: bitmap scan that sorts every pending row (4 ms instead of 0.1 ms at 20k pending). Every
#: statement of these connections is an indexed lookup by design, written so that its
#: plan does not depend on its parameters (partial-index predicates are literals; the
#: optional queue and task filters are plain filters). So each statement is planned once
#: per connection (a generic plan for psycopg's prepared statements): planning the claim
#: and the finish anew on every round trip cost ~0.4 ms of server time per exchange.
#: tests/integration/test_claim_plan.py checks the generic plans. JIT compilation is off:
#: a disabled scan costs 10^10 in the planner's estimates, far above jit_above_cost, so a
#: server with JIT available compiled every such plan on every execution (a finish whose
#: workflow triggers read all_jobs took seconds of LLVM optimisation for microseconds of
#: work); these statements are short lookups that JIT never speeds up.
WORKER_CONNECTION_OPTIONS = (
    "-c plan_cache_mode=force_generic_plan -c enable_bitmapscan=off -c enable_seqscan=off"
    " -c jit=off"
)

Connect = Callable[[], "psycopg.Connection[Any]"]


def connector(database: Database, *, owner: str, session: bool = False) -> Connect:
    """Opens a worker's dedicated connections: autocommit, TCP keepalives (dead peers are
    noticed), the worker's name in pg_stat_activity, WORKER_CONNECTION_OPTIONS, and READ
    COMMITTED whatever the database or role default (Database.pin_isolation).

    ``session``: to the session DSN (LISTEN, session locks) rather than ``dsn``. Through a
    transaction pooler (``dsn`` pooled) no startup option is sent and no statement is
    prepared: docs/howto/deployment.md says how the pooler can set the options instead.
    """

    def connect() -> psycopg.Connection[Any]:
        try:
            return database.connect(
                session=session,
                options=WORKER_CONNECTION_OPTIONS,
                keepalives=1,
                keepalives_idle=5,
                keepalives_interval=2,
                keepalives_count=3,
                application_name=f"pgtasks worker {owner}",
            )
        except psycopg.OperationalError as error:
            raise explain_pooler_refusal(error) from error

    return connect


def explain_pooler_refusal(error: psycopg.OperationalError) -> psycopg.OperationalError:
    """A pooler that refuses startup options (PgBouncer before 1.20, in any pool mode)
    says "unsupported startup parameter": say what to configure."""
    text = str(error)
    if "unsupported startup parameter" not in text:
        return error
    return psycopg.OperationalError(
        f"{' '.join(text.split())}. The server is a connection pooler (PgBouncer) that"
        " refuses the startup options of pgtasks' worker connections: declare it with"
        " App(dsn=<pooler>, session_dsn=<the server itself>), or App(pooled=True) when no"
        " direct connection is possible (pgtasks then polls)"
    )


class OwnConnection:
    """One part's connection: opened on first use and again after it was dropped."""

    def __init__(self, connect: Connect) -> None:
        self._connect = connect
        self._conn: psycopg.Connection[Any] | None = None

    def get(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
        return self._conn

    @property
    def current(self) -> psycopg.Connection[Any] | None:
        """The connection open now, if any (none is opened)."""
        return self._conn

    @property
    def usable(self) -> bool:
        """Open and not broken: an error on it came from the server, not the network."""
        return self._conn is not None and not self._conn.broken

    @property
    def broken(self) -> bool:
        """None open, or the open one is broken (a network error, a killed backend)."""
        return self._conn is None or self._conn.broken

    def drop(self) -> None:
        """Close it (errors ignored: it is usually broken); the next get() opens another."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def abandon(self) -> None:
        """Forget the connection without closing it: a stuck step still uses it."""
        self._conn = None
