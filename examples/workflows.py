"""Chain, group and chord: an order pipeline whose steps pass their results along.

    python -m examples.workflows

Runs a worker in this process (``pgtasks.Worker``). A chain fetches an order, prices it
and sends an invoice, each step receiving the previous step's result; a chord resizes
images in parallel and then builds a gallery from the list of their results; a chain
whose second step fails cancels the rest (``get()`` raises ``WorkflowFailed`` naming that
step), and its ``on_error`` handler runs once. Every
workflow is stored in the database when it is enqueued (in one transaction): a worker
crash between two steps loses nothing.
"""

from __future__ import annotations

import os
from typing import Any

from examples.running import running
from pgtasks import App, WorkflowFailed, chain, chord, group

# A schema of its own: this example never meets the jobs of your own workers (nor
# they its jobs). PGTASKS_EXAMPLE_SCHEMA moves it (the test suite does).
app = App(schema=os.environ.get("PGTASKS_EXAMPLE_SCHEMA", "examples_workflows"))


@app.task
def fetch_order(order_id: int) -> dict[str, Any]:
    return {"id": order_id, "items": [12.5, 7.5]}


@app.task
def price(order: dict[str, Any], tax: float) -> float:
    return round(sum(order["items"]) * (1 + tax), 2)


@app.task
def send_invoice(total: float, to: str) -> str:
    return f"invoice of {total} sent to {to}"


@app.task
def resize(image_id: int) -> str:
    return f"thumb-{image_id}.png"


@app.task
def build_gallery(thumbnails: list[str], title: str) -> str:
    return f"{title}: {', '.join(thumbnails)}"


@app.task(name="billing.charge", max_attempts=1)
def charge(order: dict[str, Any]) -> None:
    raise RuntimeError(f"card declined for order {order['id']}")


@app.task
def alert(failure: dict[str, Any], channel: str) -> str:
    return f"{channel}: step {failure['step']} ({failure['task_name']}) {failure['status']}"


def main() -> int:
    with running(app, concurrency=4):
        invoice = chain(
            fetch_order.s(42), price.s(tax=0.2), send_invoice.s(to="ada@example.com")
        ).delay()
        print(f"chain: {invoice.get(timeout=30)}")

        gallery = chord(group(resize.s(n) for n in range(3)), build_gallery.s("Trip")).delay()
        print(f"chord: {gallery.get(timeout=30)}")

        failing = chain(fetch_order.s(7), charge.s(), send_invoice.s(to="bob@example.com"))
        handle = failing.apply_async(on_error=alert.s(channel="#billing"))
        try:
            handle.get(timeout=30)
        except WorkflowFailed as error:  # a TaskFailed naming the step that failed
            print(f"not sent: step {error.step} ({error.task_name}) failed: {error.message}")
        jobs = app.get_workflow(handle.id)["jobs"]
        handler = next(job for job in jobs if job["workflow_step"] == "on_error")
        print(f"on_error: {app.get_job(handler['id']).get(timeout=30)}")
        print(f"workflow status: {handle.status}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
