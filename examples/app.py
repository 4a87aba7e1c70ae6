"""An example pgtasks application: the tasks the demo and docker-compose.yml run.

With no PGTASKS_DSN set it uses the embedded PostgreSQL in ./.pgtasks.
Run a worker with:  pgtasks worker -A examples.app:app
"""

from __future__ import annotations

import asyncio
import hashlib
import os

from pgtasks import App, JobContext

# A schema of its own: this example never meets the jobs of your own workers (nor
# they its jobs). PGTASKS_EXAMPLE_SCHEMA moves it (the test suite does).
app = App(schema=os.environ.get("PGTASKS_EXAMPLE_SCHEMA", "examples_app"))


@app.task(queue="emails", max_attempts=5)
def send_welcome_email(to: str, name: str = "there") -> str:
    """Pretend to send an email; returns the message id."""
    digest = hashlib.sha256(f"{to}:{name}".encode()).hexdigest()[:12]
    return f"msg-{digest}"


@app.task(priority=5)
def resize_image(image_id: int, width: int = 256) -> dict[str, int]:
    """Pretend to resize an image (a little CPU work)."""
    checksum = sum(hashlib.sha256(f"{image_id}:{i}".encode()).digest()[0] for i in range(200))
    return {"image_id": image_id, "width": width, "checksum": checksum}


@app.task(bind=True, max_attempts=5, retry_backoff=0.2, retry_jitter=False)
def sync_with_partner(ctx: JobContext, account_id: int) -> str:
    """Fails on its first two attempts (a flaky partner API), then succeeds."""
    if ctx.attempt < 3:
        raise ConnectionError(f"partner API unavailable (attempt {ctx.attempt})")
    return f"account {account_id} synced on attempt {ctx.attempt}"


@app.task(max_attempts=2, retry_backoff=0.2)
def charge_card(payment_id: int) -> None:
    """Always declined: shows a job that ends failed, with its traceback kept.

    It takes a payment id, never the card number: failure messages are stored in
    last_error and logged by the worker, so they must hold no secrets or personal data
    (see docs/explanation/security.md).
    """
    raise ValueError(f"payment {payment_id} declined by the card issuer")


@app.task
async def fetch_exchange_rate(currency: str) -> float:
    """An ``async def`` task: runs on the worker's event loop."""
    await asyncio.sleep(0.01)
    return {"EUR": 1.0, "USD": 1.08, "GBP": 0.85}.get(currency, 1.0)
