"""Durable tasks: steps that run once per job, a durable sleep, a wait for an event.

    python -m examples.durable

An order task charges a card in a step (its result checkpointed: a retry does not charge
again), reserves stock in a step whose writes commit with its checkpoint
(``ctx.transaction()``), waits for the shipping event, sleeps, then sends a reminder (an
``@app.step`` function). The first attempt fails after charging;
the retry replays the charge. Runs a worker in this process (``pgtasks.Worker``).
"""

from __future__ import annotations

import os
import time
from typing import Any

from psycopg import sql

from examples.running import running
from pgtasks import App, EventTimeout, JobContext

# A schema of its own: this example never meets the jobs of your own workers (nor
# they its jobs). PGTASKS_EXAMPLE_SCHEMA moves it (the test suite does).
app = App(schema=os.environ.get("PGTASKS_EXAMPLE_SCHEMA", "examples_durable"))

charges: list[str] = []  # the card processor's side: what it was asked to charge


def charge_card(order_id: int, cents: int, token: str) -> dict[str, Any]:
    # ``token`` is the same on every attempt of the job: an external API that takes an
    # idempotency key (Stripe's Idempotency-Key) would be given it.
    charges.append(token)
    return {"charge": f"ch_{order_id}", "cents": cents}


def reserve_stock(ctx: JobContext, order_id: int) -> int:
    # ctx.transaction(): the step's transaction, which records the step: the row and the
    # checkpoint commit together, or neither does (exactly once).
    table = sql.Identifier(app.schema, "reservations")
    with ctx.transaction() as conn:
        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (order_id bigint)").format(table))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(table), (order_id,))
    return order_id


@app.step  # a step wherever a task calls it: named "remind", checkpointed, replayed
def remind(order_id: int) -> str:
    print(f"task: reminder for order {order_id} sent")
    return "sent"


@app.task(bind=True, max_attempts=3, retry_backoff=0.05, retry_jitter=False)
def fulfil(ctx: JobContext, order_id: int, cents: int) -> str:
    charge = ctx.step("charge", lambda: charge_card(order_id, cents, str(ctx.step_token)))
    if ctx.attempt == 1:
        raise ConnectionError("the warehouse API timed out")  # retried: the charge replays
    ctx.step("reserve", reserve_stock, ctx, order_id)
    try:
        shipment = ctx.wait_for_event(f"order:{order_id}:shipped", timeout=30)
    except EventTimeout:
        return "never shipped"
    ctx.sleep(0.5)  # e.g. timedelta(days=3): the job holds no worker slot meanwhile
    remind(order_id)
    return f"{charge['charge']} shipped by {shipment['carrier']}"


def main() -> int:
    with running(app):
        job = fulfil.delay(42, 1999)
        deadline = time.monotonic() + 30
        while "pgtasks.parked" not in job.refresh().meta and time.monotonic() < deadline:
            time.sleep(0.05)
        print(
            f"job {job.id} is {job.status().value}, waiting: {job.meta['pgtasks.parked']['kind']}"
        )
        app.emit_event("order:42:shipped", {"carrier": "DHL"})
        print(f"result: {job.get(timeout=30)}")
        print(f"card charged {len(charges)} time(s), attempts used: {job.refresh().attempts}")
        for step in app.get_job_steps(job.id):
            print(f"step {step['position'] + 1}: {step['name']} {step['status']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
