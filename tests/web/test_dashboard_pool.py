"""The dashboard reads on a small pool of its own, under a statement timeout: page loads
never take the connections of the application it is mounted in."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import psycopg

from pgtasks import App
from pgtasks.web import asgi
from tests.support.population import insert_job
from tests.support.web import BASE_URL, LOOPBACK, Client

Connection = psycopg.Connection[Any]


def test_page_loads_use_the_dashboards_pool_not_the_apps(
    make_app: Callable[..., App], admin: Connection
) -> None:
    app = make_app(pool_max_size=1)

    @app.task
    def ping() -> None: ...

    for _ in range(60):
        insert_job(admin, app, status="failed", finished_ago=1, last_error="x\n" * 10_000)
    dashboard = asgi(app, pool_size=2)

    async def load_pages() -> list[int]:
        transport = httpx.ASGITransport(app=dashboard, client=LOOPBACK)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            paths = ["/", "/jobs", "/jobs?status=failed", "/workers"] * 4
            responses = await asyncio.gather(*(client.get(path) for path in paths))
        return [response.status_code for response in responses]

    async def enqueue_meanwhile() -> list[int]:
        pages = asyncio.ensure_future(load_pages())
        ids = []
        while not pages.done():
            ids.append(ping.delay().id)  # on the App's pool of one connection
            await asyncio.sleep(0)
        assert set(await pages) == {200}
        return ids

    assert asyncio.run(enqueue_meanwhile())
    # The dashboard's connections: a pool of its own, at most its size, named and with
    # a statement timeout and READ COMMITTED whatever the database's defaults.
    database = dashboard.dashboard.db.database  # type: ignore[attr-defined]
    pool = database.get_pool()
    assert pool is not app.database.get_pool()
    assert 1 <= pool.get_stats()["pool_size"] <= 2
    settings = database.run(
        lambda conn: conn.execute(
            "SELECT current_setting('application_name'), current_setting('statement_timeout'),"
            " current_setting('transaction_isolation')"
        ).fetchone()
    )
    assert settings == ("pgtasks web", "5s", "read committed")
    dashboard.close()


def test_a_read_past_the_statement_timeout_is_a_503_that_says_so(
    make_client: Callable[..., Client], app: App, admin: Connection, dsn: str
) -> None:
    insert_job(admin, app)
    web = make_client(statement_timeout=0.3)
    assert web.get("/jobs").status_code == 200
    with psycopg.connect(dsn) as locker:
        locker.execute(f'LOCK TABLE "{app.schema}".jobs IN ACCESS EXCLUSIVE MODE')
        response = web.get("/jobs")
        locker.rollback()
    assert response.status_code == 503
    assert "statement timeout (0.3 s)" in response.text
    assert web.get("/jobs").status_code == 200  # the pool's connection is fine after it
