"""A producer's pool after an outage longer than a few seconds (a failover, a restart).

psycopg_pool retries a failed connection after 1 s, 2 s, 4 s, 8 s …: after an outage of
seven seconds its next attempt is about eight seconds away when the server is back, and
every enqueue of those seconds failed with "no connection" although the server accepted
connections. pgtasks probes the server: once it accepts a direct connection and the pool
still has none half a second later, a new pool serves (opening.take), so enqueues work
again at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from pgtasks import App, DatabaseError
from tests.support.schemas import new_schema_name
from tests.support.servers import PrivateServer
from tests.support.waiting import wait_until

#: Seconds the server is down: the pool's attempts then are 4 s and more apart.
OUTAGE = 8.0


@pytest.fixture
def server() -> Iterator[PrivateServer]:
    private = PrivateServer()
    yield private
    private.close()


def test_enqueues_work_again_as_soon_as_the_server_is_back_whatever_the_pools_backoff(
    server: PrivateServer,
) -> None:
    app = App(server.dsn, schema=new_schema_name(), connect_timeout=2.0)
    try:
        app.migrate()

        @app.task
        def noop() -> None:
            return None

        before = noop.delay().id
        server.crash()
        pool = app.database.get_pool()

        down_since = time.monotonic()

        def outage_over() -> bool:
            # Enqueues fail meanwhile (the producer keeps trying, as a web app would).
            with pytest.raises(DatabaseError):
                noop.delay()
            return time.monotonic() - down_since >= OUTAGE

        wait_until(outage_over, timeout=OUTAGE + 10, message=f"an outage of {OUTAGE:g} s")
        server.start()

        after = noop.delay().id  # the pool would still wait out its backoff

        assert after > before
        assert app.database.get_pool() is not pool  # replaced; the old one closed
        assert pool.closed or wait_until(lambda: pool.closed, message="the old pool closed")
        assert noop.delay().id > after
    finally:
        app.close()
