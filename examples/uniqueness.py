"""Uniqueness scopes: a key for life, while active, and per period.

    python -m examples.uniqueness

``sync_account`` is unique while active: enqueuing an account that is already pending or
running returns that job; once it finished, the next enqueue makes a new job.
``send_digest`` is unique per 2-second window of the database's clock. ``send_receipt``
has a key for life. A worker runs in this process (``pgtasks.Worker``).
"""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime, timedelta

from pgtasks import App, UniquenessError, Worker

# A schema of its own: this example never meets the jobs of your own workers (nor
# they its jobs). PGTASKS_EXAMPLE_SCHEMA moves it (the test suite does).
app = App(schema=os.environ.get("PGTASKS_EXAMPLE_SCHEMA", "examples_uniqueness"))
may_finish = threading.Event()


@app.task(unique_while="active", unique_key=lambda account_id: f"sync:{account_id}")
def sync_account(account_id: int) -> str:
    may_finish.wait(30)
    return f"account {account_id} synced"


@app.task(unique_for=timedelta(seconds=2), unique_key=lambda user_id: f"digest:{user_id}")
def send_digest(user_id: int) -> str:
    return f"digest for user {user_id}"


@app.task(unique_key=lambda order_id: f"receipt:{order_id}")
def send_receipt(order_id: int) -> str:
    return f"receipt {order_id}"


def main() -> int:
    app.migrate()
    worker = Worker(app, concurrency=2, poll_interval=0.2)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        first = sync_account.delay(42)
        again = sync_account.delay(42)
        print(f"while active: same job {again.id == first.id}, existed {again.existed}")
        may_finish.set()
        print(f"first: {first.get(timeout=30)}")
        later = sync_account.delay(42)
        print(f"after it finished: new job {later.id != first.id}, existed {later.existed}")
        print(f"later: {later.get(timeout=30)}")

        digests = send_digest.delay_many([{"user_id": 7}, {"user_id": 7}, {"user_id": 8}])
        print(f"digests in one window: {len({job.id for job in digests})} jobs for 3 enqueues")
        window_end = digests[0].fetch().created_at + timedelta(seconds=2)
        while app_now() < window_end:  # the next window starts by 2 s after the first enqueue
            time.sleep(0.1)
        print(f"next window: new job {send_digest.delay(7).id != digests[0].id}")

        receipt = send_receipt.delay(1001)
        receipt.get(timeout=30)
        print(f"key for life: same job after it ran {send_receipt.delay(1001).id == receipt.id}")

        try:
            sync_account.apply_async([1], unique_for=timedelta(0))
        except UniquenessError as error:
            print(f"refused: {error}")
    finally:
        may_finish.set()
        worker.stop(timeout=10)
        thread.join(30)
        app.close()
    return 0


def app_now() -> datetime:
    """The database's clock (windows are of it, not of this machine's)."""
    with app.connection() as conn:
        (now,) = conn.execute("SELECT now()").fetchall()[0]
    return now  # type: ignore[no-any-return]


if __name__ == "__main__":
    raise SystemExit(main())
