"""pgtasks.contrib.asgi / .fastapi: the App's pools and a worker live as long as the service."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import psycopg
import pytest
from fastapi import FastAPI

from pgtasks import App, ConfigurationError, SchemaNotMigratedError, Worker
from pgtasks.contrib.asgi import lifespan, run_app
from pgtasks.contrib.fastapi import lifespan as fastapi_lifespan
from tests.support.inprocess import FAST, select


def test_fastapi_module_is_the_asgi_lifespan() -> None:
    assert fastapi_lifespan is lifespan


@asynccontextmanager
async def serving(api: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """What a server does: the lifespan around the requests (sent through httpx)."""
    async with api.router.lifespan_context(api):
        transport = httpx.ASGITransport(app=api)
        async with httpx.AsyncClient(transport=transport, base_url="http://service") as client:
            yield client


def starting(api: FastAPI) -> None:
    """Start and stop the service without a request."""

    async def program() -> None:
        async with serving(api):
            pass

    asyncio.run(program())


def service(app: App, **options: Any) -> FastAPI:
    """A FastAPI service whose endpoint enqueues in a transaction and awaits the result."""

    @app.task
    def double(value: int) -> int:
        return value * 2

    api = FastAPI(lifespan=lifespan(app, **options))

    @api.post("/double/{value}")
    async def enqueue(value: int, rollback: bool = False) -> dict[str, Any]:
        async with app.aconnection() as conn:
            try:
                async with conn.transaction():
                    job = await double.aapply_async((value,), connection=conn)
                    if rollback:
                        raise LookupError("roll back")
            except LookupError:
                return {"job_id": None}
        return {"job_id": job.id, "result": await job.aget(timeout=10)}

    return api


def test_the_service_enqueues_in_its_transaction_and_its_worker_runs_the_jobs(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    api = service(app, worker=FAST)

    async def program() -> None:
        async with serving(api) as client:
            workers = select(admin, app, "SELECT id FROM {schema}.workers")
            assert len(workers) == 1, "the worker registered during the startup"
            answer = (await client.post("/double/21")).json()
            assert answer["result"] == 42
            refused = await client.post("/double/5", params={"rollback": True})
            assert refused.json() == {"job_id": None}

    asyncio.run(program())
    jobs = select(admin, app, "SELECT args, status FROM {schema}.all_jobs ORDER BY id")
    assert [tuple(row) for row in jobs] == [([21], "done")]
    # Shutdown: the worker deregistered and the pools are closed.
    assert select(admin, app, "SELECT id FROM {schema}.workers") == []
    assert app.database._apool is None


def test_without_a_worker_only_the_pools_open_and_close(app: App) -> None:
    api = service(app)

    async def program() -> None:
        async with serving(api) as client:
            assert app.database._apool is not None
            response = await client.post("/double/1", params={"rollback": True})
            assert response.json() == {"job_id": None}

    asyncio.run(program())
    assert app.database._apool is None


def test_an_unmigrated_schema_fails_the_startup(make_app: Callable[..., App]) -> None:
    unmigrated = make_app(migrate=False)
    api = service(unmigrated, worker=FAST)
    with pytest.raises(SchemaNotMigratedError, match="pgtasks migrate"):
        starting(api)


def test_migrate_true_migrates_at_startup(
    make_app: Callable[..., App], admin: psycopg.Connection[Any]
) -> None:
    fresh = make_app(migrate=False)
    api = service(fresh, migrate=True, worker=FAST)

    async def program() -> None:
        async with serving(api) as client:
            assert (await client.post("/double/4")).json()["result"] == 8

    asyncio.run(program())


@pytest.mark.parametrize(
    ("worker", "message"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"no_such_option": 1}, "no_such_option"),
        ("yes", "takes True, a mapping of Worker options or a Worker"),
    ],
)
def test_bad_worker_options_fail_the_startup(app: App, worker: Any, message: str) -> None:
    api = service(app, worker=worker)
    with pytest.raises(ConfigurationError, match=message):
        starting(api)
    assert app.database._apool is None, "the pools opened so far are closed again"


def test_a_worker_of_another_app_is_refused(app: App, make_app: Callable[..., App]) -> None:
    other = make_app()
    api = service(app, worker=Worker(other, **FAST))
    with pytest.raises(ConfigurationError, match="another App"):
        starting(api)


def test_shutdown_stops_the_worker_gracefully_and_releases_what_outlives_it(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    started, release = threading.Event(), threading.Event()

    @app.task
    def slow() -> str:
        started.set()
        release.wait(30)
        return "finished"

    worker = Worker(app, **{**FAST, "shutdown_timeout": 0.5})
    api = FastAPI(lifespan=lifespan(app, worker=worker))
    try:

        async def program() -> int:
            async with serving(api):
                job = await slow.adelay()
                assert await asyncio.to_thread(started.wait, 10)
            return job.id

        job_id = asyncio.run(program())
        # The shutdown returned: the job outlived shutdown_timeout and went back to pending
        # without using up its attempt; the worker deregistered.
        row = select(
            admin, app, "SELECT status, attempts FROM {schema}.all_jobs WHERE id = %s", (job_id,)
        )
        assert [tuple(r) for r in row] == [("pending", 0)]
        assert select(admin, app, "SELECT id FROM {schema}.workers") == []
        assert worker.registration.ended.is_set()
    finally:
        release.set()


def test_run_app_composes_with_a_lifespan_of_ones_own(app: App) -> None:
    @app.task
    def echo(value: str) -> str:
        return value

    async def program() -> Worker | None:
        async with run_app(app, worker=FAST) as worker:
            assert isinstance(worker, Worker)
            assert worker.worker_id is not None
            handle = await echo.adelay("hello")
            assert await handle.aget(timeout=10) == "hello"
        return worker

    worker = asyncio.run(program())
    assert worker is not None
    # run_app's exit returned after the worker stopped and deregistered.
    assert worker.registration.ended.is_set()
