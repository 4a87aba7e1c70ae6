"""Durable tasks for tests/integration/test_durable.py and tests/faults/test_durable_faults.py.

Configured from the environment like ``meta_app``: ``PGTASKS_DSN`` and
``PGTASKS_TEST_SCHEMA``. Every step records its run in ``<schema>.effects`` (job id, step,
attempt, pid) on a connection of its own, so a test counts how often a step's side effect
happened. Tasks that must be held wait for a file to exist (a path passed as an argument).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pgtasks import App, EventTimeout, JobContext, Snooze
from tests.apps import lazy_app
from tests.apps._environment import environment_app


def create_effects_table(conn: psycopg.Connection[Any], schema: str) -> None:
    conn.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {}.effects (job_id bigint, step text, attempt int,"
            " pid int, token text, at timestamptz DEFAULT clock_timestamp())"
        ).format(sql.Identifier(schema))
    )


def record(app: App, context: JobContext, step: str, conn: Any = None) -> None:
    """One side effect of ``step`` (on ``conn``, in its transaction, when given)."""
    statement = sql.SQL(
        "INSERT INTO {}.effects (job_id, step, attempt, pid, token) VALUES (%s, %s, %s, %s, %s)"
    ).format(sql.Identifier(app.schema))
    values = (context.job_id, step, context.attempt, os.getpid(), context.step_token)
    if conn is not None:
        conn.execute(statement, values)
        return
    with psycopg.connect(os.environ.get("PGTASKS_DSN", ""), autocommit=True) as own:
        own.execute(statement, values)


def effects(dsn: str, schema: str, job_id: int) -> list[tuple[str, int]]:
    """(step, attempt) of each side effect of the job, in order."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL("SELECT step, attempt FROM {}.effects WHERE job_id = %s ORDER BY at").format(
                sql.Identifier(schema)
            ),
            (job_id,),
        ).fetchall()
    return [(row[0], row[1]) for row in rows]


def wait_for(path: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not Path(path).exists() and time.monotonic() < deadline:
        time.sleep(0.02)


@dataclasses.dataclass(frozen=True)
class Tasks:
    five_steps: Any
    loop_steps: Any
    flaky_step: Any
    db_step: Any
    sleeper: Any
    waiter: Any
    snoozer: Any
    versioned: Any
    hostile: Any
    async_steps: Any
    failing_step: Any
    two_waits: Any
    held_step: Any


def register_tasks(app: App) -> Tasks:
    tasks = {
        **_step_tasks(app),
        **_parking_tasks(app),
        **_transaction_tasks(app),
        **_other_tasks(app),
    }
    return Tasks(**tasks)


def _step_tasks(app: App) -> dict[str, Any]:
    @app.task(bind=True, name="durable.five_steps", max_attempts=5, retry_backoff=0.1)
    def five_steps(ctx: JobContext, hold: str | None = None, fail_once: bool = False) -> int:
        total = 0
        for number in range(1, 6):
            if number == 3 and hold:
                Path(hold + ".reached").touch()
                wait_for(hold)
            if number == 4 and fail_once and ctx.attempt == 1:
                raise RuntimeError("the 1st attempt fails before step 4")

            def run(value: int = number) -> int:
                record(app, ctx, f"step{value}")
                return value * 10

            total += ctx.step(f"step{number}", run)
        return total

    @app.task(bind=True, name="durable.loop_steps", max_attempts=3, retry_backoff=0.1)
    def loop_steps(ctx: JobContext, count: int) -> list[int]:
        values = [
            ctx.step("item", lambda i=i: (record(app, ctx, f"item{i}"), i)[1]) for i in range(count)
        ]
        if ctx.attempt == 1:
            raise RuntimeError("retry once: the items replay")
        return values

    @app.task(bind=True, name="durable.flaky_step", retry_backoff=0.01)
    def flaky_step(ctx: JobContext, failures: int) -> str:
        tries: list[int] = []

        def call() -> str:
            tries.append(1)
            record(app, ctx, "flaky")
            if len(tries) <= failures:
                raise ConnectionError(f"try {len(tries)} fails")
            return f"ok after {len(tries)}"

        return str(ctx.step("call", call, retries=3))

    return {
        "five_steps": five_steps,
        "loop_steps": loop_steps,
        "flaky_step": flaky_step,
    }


def _parking_tasks(app: App) -> dict[str, Any]:
    @app.task(bind=True, name="durable.sleeper", max_attempts=2)
    def sleeper(ctx: JobContext, seconds: float) -> str:
        ctx.step("before", lambda: record(app, ctx, "before"))
        ctx.sleep(seconds)
        ctx.step("after", lambda: record(app, ctx, "after"))
        return "woke"

    @app.task(bind=True, name="durable.waiter", max_attempts=2)
    def waiter(ctx: JobContext, key: str, timeout: float | None = None) -> Any:
        ctx.step("before", lambda: record(app, ctx, "before"))
        try:
            payload = ctx.wait_for_event(key, timeout=timeout)
        except EventTimeout:
            return "timed out"
        ctx.step("after", lambda: record(app, ctx, "after"))
        return payload

    @app.task(bind=True, name="durable.two_waits", max_attempts=2)
    def two_waits(ctx: JobContext, key: str) -> list[Any]:
        return [ctx.wait_for_event(key), ctx.wait_for_event(key)]

    @app.task(bind=True, name="durable.snoozer", max_attempts=1)
    def snoozer(ctx: JobContext, times: int) -> int:
        record(app, ctx, "run")
        count = ctx.meta.get("snoozes", 0)
        if count < times:
            ctx.update_meta(snoozes=count + 1)
            raise Snooze(0.1)
        return ctx.attempt

    return {"sleeper": sleeper, "waiter": waiter, "two_waits": two_waits, "snoozer": snoozer}


def _transaction_tasks(app: App) -> dict[str, Any]:
    @app.task(bind=True, name="durable.db_step", max_attempts=3, retry_backoff=0.1)
    def db_step(ctx: JobContext) -> str:
        token = ctx.step(
            "write",
            lambda conn: (record(app, ctx, "write", conn), ctx.step_token)[1],
            connection=True,
        )
        if ctx.attempt == 1:
            raise RuntimeError("fails after the exactly-once step")
        return str(token)

    @app.task(bind=True, name="durable.failing_step", max_attempts=2, retry_backoff=0.05)
    def failing_step(ctx: JobContext) -> None:
        def boom() -> None:
            record(app, ctx, "boom")
            raise ValueError("boom")

        ctx.step("boom", boom)

    @app.task(bind=True, name="durable.held_step", max_attempts=3)
    def held_step(ctx: JobContext, path: str) -> Any:
        def hold() -> str:
            record(app, ctx, "held")
            Path(f"{path}.{ctx.attempt}.reached").touch()
            wait_for(path)
            return f"attempt {ctx.attempt} in {os.getpid()}"

        first = ctx.step("held", hold)
        return [first, ctx.step("after", lambda: record(app, ctx, "after"))]

    return {"db_step": db_step, "failing_step": failing_step, "held_step": held_step}


def _other_tasks(app: App) -> dict[str, Any]:
    @app.task(bind=True, name="durable.versioned", max_attempts=2)
    def versioned(ctx: JobContext, hold: str | None = None) -> str:
        ctx.step("a", lambda: "a")
        if hold and ctx.attempt == 1:
            ctx.sleep(0.3)
        if os.environ.get("DURABLE_NEW_CODE") and ctx.version("new-pricing"):
            return str(ctx.step("new-price", lambda: "new"))
        return str(ctx.step("old-price", lambda: "old"))

    @app.task(name="durable.renamed", aliases=["durable.old_name"])
    def renamed(value: int) -> int:
        return value + 1

    @app.task(bind=True, name="durable.hostile", max_attempts=2)
    def hostile(ctx: JobContext, kind: str) -> Any:
        if kind == "object":
            return ctx.step("object", lambda: object())
        if kind == "reserved":
            return ctx.step("pgtasks.sleep", lambda: 1)
        if kind == "long":
            return ctx.step("x" * 500, lambda: 1)
        return ctx.step(kind, lambda: kind)

    @app.task(bind=True, name="durable.async_steps", max_attempts=3, retry_backoff=0.1)
    async def async_steps(ctx: JobContext) -> int:
        async def part(value: int) -> int:
            await asyncio.to_thread(record, app, ctx, f"part{value}")
            return value

        first = await ctx.astep("one", part, 1)
        await ctx.asleep(0.1)  # parks the job: the next run replays "one"
        second = await ctx.astep("two", part, 2)
        if ctx.attempt == 1:
            raise RuntimeError("retry once")
        return int(first) + int(second)

    return {
        "versioned": versioned,
        "hostile": hostile,
        "async_steps": async_steps,
    }


def build_app() -> App:
    """The app of a worker process, from the environment."""
    app = environment_app(pool_min_size=0, pool_max_size=4)
    register_tasks(app)
    return app


#: ``app`` is built on first access, so importing this module needs no environment.
__getattr__ = lazy_app(build_app, __name__)
