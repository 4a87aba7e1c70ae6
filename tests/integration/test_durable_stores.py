"""Events in an App of several stores: an event goes to the store of the jobs that wait
for it (``queue=``, a store's App), or to every store; ``aemit_event`` joins the
transaction of a caller's ``AsyncConnection`` (docs/howto/durable.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgtasks import App, ConfigurationError, CrossStoreError, JobContext
from tests.support.inprocess import running_worker
from tests.support.waiting import wait_until


def events_in(dsn: str, schema: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        query = sql.SQL("SELECT key FROM {}.job_events ORDER BY id").format(sql.Identifier(schema))
        return [row[0] for row in conn.execute(query).fetchall()]


def parked(app: App) -> int:
    return sum(sum(kinds.values()) for kinds in app.count_parked_jobs().values())


@pytest.mark.timeout(120)
def test_events_reach_the_store_whose_jobs_wait(
    make_stores_app: Callable[..., App], other_database: str, dsn: str
) -> None:
    app = make_stores_app(routes={"emails": "bulk"}, dsns={"bulk": other_database})
    schemas: dict[str, str] = app.schemas  # type: ignore[attr-defined]
    bulk = app.for_store("bulk")

    @app.task(bind=True, queue="emails", max_attempts=2)
    def wait(ctx: JobContext, key: str) -> Any:
        return ctx.wait_for_event(key)

    with running_worker(app, queues=["emails"]):
        everywhere, routed, viewed, joined = (wait.delay(f"k{n}") for n in range(1, 5))
        wait_until(lambda: parked(bulk) == 4, timeout=20, message="four jobs waiting in bulk")
        app.emit_event("k1", 1)  # no queue: every store
        assert everywhere.get(timeout=20) == 1
        app.emit_event("k2", 2, queue="emails")  # the store of the queue whose jobs wait
        assert routed.get(timeout=20) == 2
        bulk.emit_event("k3", 3)  # a store's App: its store
        assert viewed.get(timeout=20) == 3

        with psycopg.connect(other_database) as conn, pytest.raises(ConfigurationError):
            app.emit_event("k4", 0, connection=conn)  # which store? name the queue
        with psycopg.connect(dsn) as conn, pytest.raises(CrossStoreError, match="store 'bulk'"):
            app.emit_event("k4", 0, connection=conn, queue="emails")

        async def emit(commit: bool) -> None:
            async with await psycopg.AsyncConnection.connect(other_database) as conn:
                await app.aemit_event("k4", {"commit": commit}, connection=conn, queue="emails")
                await (conn.commit() if commit else conn.rollback())

        asyncio.run(emit(False))  # rolled back with the caller's transaction: no event
        assert parked(bulk) == 1 and joined.status() == "pending"
        asyncio.run(emit(True))
        assert joined.get(timeout=20) == {"commit": True}

    assert events_in(dsn, schemas["default"]) == ["k1"]
    assert events_in(other_database, schemas["bulk"]) == ["k1", "k2", "k3", "k4"]


def test_aemit_event_joins_an_async_transaction_of_one_store(app: App, dsn: str) -> None:
    async def emit() -> tuple[int, int]:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            first = await app.aemit_event("k", 1, connection=conn)
            await conn.rollback()
            second = await app.aemit_event("k", 2, connection=conn)
            await conn.commit()
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await app.aemit_event("k", 3, connection=conn)  # autocommit: its own transaction
        return first, second

    first, second = asyncio.run(emit())
    assert second > first
    with psycopg.connect(dsn, autocommit=True) as conn:
        query = sql.SQL("SELECT payload FROM {}.job_events ORDER BY id").format(
            sql.Identifier(app.schema)
        )
        assert [row[0] for row in conn.execute(query).fetchall()] == [2, 3]
