"""A user's application module, as pgtasks.testing's tests use it.

Like a real project's ``myproj/tasks.py``: the App is created at import time from the
environment (PGTASKS_DSN, or the embedded server), and nothing connects until used.
Tests point it at an isolated schema with the ``pgtasks_isolate`` fixture.
"""

from __future__ import annotations

from pgtasks import App, JobContext, Retry

app = App()


@app.task(queue="emails")
def send_receipt(order_id: int) -> str:
    return f"receipt for order {order_id}"


@app.task
def place_order(order_id: int, items: list[str]) -> int:
    """Places an order and enqueues its receipt (a job that enqueues a job)."""
    send_receipt.delay(order_id)
    return len(items)


@app.task(bind=True, queue="payments", max_attempts=2)
def charge_card(ctx: JobContext, amount: int) -> str:
    """Asks for a second attempt at once, then refuses a negative amount for good."""
    if amount < 0:
        if ctx.attempt == 1:
            raise Retry(delay=0)
        raise ValueError(f"cannot charge {amount}")
    return f"charged {amount}"


@app.task(queue="emails")
async def send_newsletter(issue: int) -> str:
    return f"newsletter {issue} sent"
