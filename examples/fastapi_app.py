"""A FastAPI service that enqueues inside its own transaction and runs a worker beside it.

    python -m examples.fastapi_app          # serves, calls itself over HTTP, stops
    uvicorn examples.fastapi_app:api        # serves until Ctrl-C

``pgtasks.contrib.fastapi.run_app`` opens the App's pools when the service starts (an
unmigrated schema fails the startup), runs a worker on a thread of its own, and at
shutdown stops the worker gracefully and closes the pools.

``POST /orders`` writes the order and its confirmation job in one transaction: the job
exists exactly when the order does. ``?fail=true`` raises after both writes, so the
transaction rolls back and neither exists. ``GET /jobs/{id}`` awaits a job's result.
The dashboard is mounted at ``/ops/tasks`` (no authentication configured: it answers
loopback clients only); its open pages never hold up the service's shutdown.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, HTTPException
from psycopg import sql

from pgtasks import App, JobCancelled, JobNotFoundError, TaskFailed
from pgtasks.contrib.fastapi import run_app
from pgtasks.web import asgi as dashboard

# A schema of its own: this example never meets the jobs of your own workers (nor
# they its jobs). PGTASKS_EXAMPLE_SCHEMA moves it (the test suite does).
app = App(schema=os.environ.get("PGTASKS_EXAMPLE_SCHEMA", "examples_fastapi"))
# The example's own table, beside pgtasks' tables in the App's schema.
ORDERS = sql.SQL("{}.example_orders").format(sql.Identifier(app.schema))


@app.task(queue="orders")
def confirm_order(order_id: int, item: str) -> str:
    return f"order {order_id} ({item}) confirmed"


# The dashboard, as docs/howto/dashboard.md mounts it (with auth=basic_auth(...) beyond
# localhost). Its event streams end by themselves when the server stops.
ops = dashboard(app)


@asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[None]:
    # Your own startup composes with pgtasks': here, the example's table.
    async with run_app(app, worker={"concurrency": 4, "poll_interval": 0.5}, migrate=True):
        async with app.aconnection() as conn:
            await conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (id bigserial PRIMARY KEY, item text)"
                ).format(ORDERS)
            )
        try:
            yield
        finally:
            ops.close()  # the dashboard's own connections


api = FastAPI(lifespan=lifespan)
api.mount("/ops/tasks", ops)


@api.post("/orders")
async def create_order(item: str, fail: bool = False) -> dict[str, Any]:
    async with app.aconnection() as conn, conn.transaction():
        cursor = await conn.execute(
            sql.SQL("INSERT INTO {} (item) VALUES (%s) RETURNING id").format(ORDERS), (item,)
        )
        (order_id,) = await cursor.fetchone() or (0,)
        job = await confirm_order.aapply_async((order_id, item), connection=conn)
        if fail:
            # Raising inside the transaction rolls back the order and its job together.
            raise HTTPException(status_code=409, detail=f"order {order_id} refused")
    return {"order_id": order_id, "job_id": job.id}


@api.get("/jobs/{job_id}")
async def job_result(job_id: int, timeout: float = 10.0) -> dict[str, Any]:
    try:
        job = await app.aget_job(job_id)
        result = await job.aget(timeout=timeout)
    except JobNotFoundError:
        raise HTTPException(status_code=404, detail=f"no job {job_id}") from None
    except TimeoutError:
        raise HTTPException(status_code=504, detail=f"job {job_id} not finished") from None
    except (TaskFailed, JobCancelled) as error:
        raise HTTPException(status_code=500, detail=str(error)) from None
    return {"job_id": job_id, "status": (await job.astatus()).value, "result": result}


async def main() -> None:
    with socket.socket() as probe:  # a free port on loopback
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(api, host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            serving.result()  # the startup failed: raise its error
        await asyncio.sleep(0.02)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            created = (await client.post("/orders", params={"item": "teapot"})).json()
            print(f"created: order {created['order_id']}, job {created['job_id']}")
            result = (await client.get(f"/jobs/{created['job_id']}")).json()
            print(f"result: {result['status']}: {result['result']}")

            refused = await client.post("/orders", params={"item": "kettle", "fail": True})
            print(f"refused: HTTP {refused.status_code}")
            overview = await client.get("/ops/tasks/")
            print(f"dashboard: HTTP {overview.status_code}")
        async with app.aconnection() as conn:
            cursor = await conn.execute(
                sql.SQL(
                    "SELECT (SELECT count(*) FROM {} WHERE item = 'kettle'),"
                    " (SELECT count(*) FROM {}.jobs WHERE task_name = %s AND args->>1 = 'kettle')"
                ).format(ORDERS, sql.Identifier(app.schema)),
                (confirm_order.name,),
            )
            counts = await cursor.fetchone()
        print(
            f"after the rollback: {counts[0] if counts else '?'} orders,"
            f" {counts[1] if counts else '?'} jobs"
        )
    finally:
        server.should_exit = True
        await serving
    print("service stopped")


if __name__ == "__main__":
    asyncio.run(main())
