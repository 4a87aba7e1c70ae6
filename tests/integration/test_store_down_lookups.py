"""A store that is down costs nothing to lookups by id in the healthy stores: identities
already read are matched first, unknown ones are read concurrently (the first that
matches answers, a store slow to connect is not waited for), and a store whose identity
read failed is not read again before its back-off ends."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict

from pgtasks import App, DatabaseUnavailableError
from tests.support.proxy import SlowProxy
from tests.support.schemas import SchemaAdmin
from tests.support.waiting import wait_until

#: Long enough that a lookup which waited for it could not be mistaken for one that did not.
LONG_TIMEOUT = 30.0
#: An id store number 1 issued (the down store's number, unknown while it is down).
DOWN_STORE_ID = (1 << 48) | 7


def through(proxy: SlowProxy) -> str:
    return f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres?sslmode=disable"


@pytest.fixture
def socket_path(dsn: str) -> str:
    params = conninfo_to_dict(dsn)
    host = str(params.get("host", ""))
    if not host.startswith("/"):
        pytest.skip("the proxy fronts the embedded server's Unix socket")
    return f"{host}/.s.PGSQL.{params.get('port', 5432)}"


@pytest.fixture
def dropping(tmp_path: Any) -> Iterator[SlowProxy]:
    """A port that accepts each connection and closes it at once (a server that is down
    behind a load balancer), counting them in ``accepted``."""
    proxy = SlowProxy(str(tmp_path / "nothing-here"), delay=0.0)
    proxy.start()
    yield proxy
    proxy.close()


def test_a_down_store_is_not_read_again_for_ids_of_the_others_nor_within_its_back_off(
    make_stores_app: Callable[..., App], schema_admin: SchemaAdmin, dropping: SlowProxy
) -> None:
    app = make_stores_app(
        dsns={"bulk": through(dropping)}, migrate=False, connect_timeout=LONG_TIMEOUT
    )
    schema_admin.create_migrated(app.schemas["default"])  # type: ignore[attr-defined]
    app.store_router.retry_identity_after = (LONG_TIMEOUT * 20, LONG_TIMEOUT * 20)

    @app.task(name="down.plain")
    def plain() -> None:
        pass

    job = plain.delay()
    assert app.get_job(job.id).id == job.id
    down = app.store_router.identities()["bulk"]  # its read (under way, or done) joined
    assert isinstance(down, DatabaseUnavailableError), down
    assert dropping.accepted, "the down store was never tried"
    tried = len(dropping.accepted)
    for _ in range(20):
        assert app.get_job(job.id).id == job.id
    assert len(dropping.accepted) == tried, "a default-store lookup read the down store"
    # An id of the down store's number: its remembered error, without a connection.
    for _ in range(5):
        with pytest.raises(DatabaseUnavailableError, match=r"127\.0\.0\.1"):
            app.get_job(DOWN_STORE_ID)
    assert len(dropping.accepted) == tried, "the down store was read within its back-off"
    # Asked to refresh, every store is read; once the back-off ends, a lookup reads again.
    assert isinstance(app.store_router.identities(refresh=True)["bulk"], DatabaseUnavailableError)
    assert len(dropping.accepted) > tried
    app.store_router.retry_identity_after = (0.05, 0.1)
    assert isinstance(app.store_router.identities(refresh=True)["bulk"], DatabaseUnavailableError)
    tried = len(dropping.accepted)

    def read_again() -> bool:
        with pytest.raises(DatabaseUnavailableError):
            app.get_job(DOWN_STORE_ID)
        return len(dropping.accepted) > tried

    wait_until(read_again, timeout=20, message="the down store to be read after its back-off")


def test_a_lookup_does_not_wait_for_a_store_that_hangs_on_connect(
    make_stores_app: Callable[..., App], schema_admin: SchemaAdmin, socket_path: str
) -> None:
    hanging = SlowProxy(socket_path, delay=LONG_TIMEOUT * 10)  # accepts, answers nothing
    hanging.start()
    try:
        app = make_stores_app(
            dsns={"bulk": through(hanging)}, migrate=False, connect_timeout=LONG_TIMEOUT
        )
        schema_admin.create_migrated(app.schemas["default"])  # type: ignore[attr-defined]

        @app.task(name="down.hang")
        def plain() -> None:
            pass

        job = plain.delay()
        found: list[int] = []

        def look_up() -> None:
            for _ in range(20):
                found.append(app.get_job(job.id).id)

        lookups = threading.Thread(target=look_up, daemon=True)
        lookups.start()
        lookups.join(timeout=LONG_TIMEOUT / 3)
        assert not lookups.is_alive(), "a lookup waited for the hanging store's connect"
        assert found == [job.id] * 20
        assert hanging.accepted, "the hanging store was never tried"
    finally:
        hanging.close()  # its pending read fails now, not after connect_timeout
