"""A streaming replica in tests: wait until it has replayed the primary's WAL, or keep it
behind (replay paused) for a block, as a replica lagging by seconds would be."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg

from tests.support.waiting import wait_until

Connection = psycopg.Connection[Any]


def caught_up(admin: Connection, standby: Connection) -> None:
    """Wait until the replica has replayed everything the primary wrote until now."""
    (lsn,) = admin.execute("SELECT pg_current_wal_lsn()::text").fetchone() or ("",)
    wait_until(
        lambda: (
            standby.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)).fetchone()
            == (True,)
        ),
        timeout=20,
        message="the replica to replay the primary's WAL",
    )


@contextlib.contextmanager
def replay_paused(standby: Connection) -> Iterator[None]:
    """The replica applies no more WAL inside the block (it keeps receiving it)."""
    standby.execute("SELECT pg_wal_replay_pause()")
    wait_until(
        lambda: standby.execute("SELECT pg_get_wal_replay_pause_state()").fetchone() == ("paused",),
        message="replay paused",
    )
    try:
        yield
    finally:
        standby.execute("SELECT pg_wal_replay_resume()")
