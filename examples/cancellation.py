"""Cancel a running job: a bound sync task stops at its next ``ctx.cancelled()`` check.

    python -m examples.cancellation

Runs a worker in this process (``pgtasks.Worker``), starts a long export, cancels it
after a few batches, and shows that the job ends ``cancelled``.
"""

from __future__ import annotations

import os
import threading
import time

from pgtasks import App, JobCancelled, JobContext, Worker

# A schema of its own: this example never meets the jobs of your own workers (nor
# they its jobs). PGTASKS_EXAMPLE_SCHEMA moves it (the test suite does).
app = App(schema=os.environ.get("PGTASKS_EXAMPLE_SCHEMA", "examples_cancellation"))


@app.task(bind=True)
def export_rows(ctx: JobContext, batches: int) -> int:
    exported = 0
    for _ in range(batches):
        if ctx.cancelled():
            print(f"export: cancellation seen after {exported} batches, stopping")
            break
        time.sleep(0.05)  # one batch of work
        exported += 1
    return exported


def main() -> int:
    app.migrate()
    worker = Worker(app, concurrency=2)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        job = export_rows.delay(batches=10_000)
        while job.status().value != "running":
            time.sleep(0.02)
        time.sleep(0.3)  # let a few batches run
        print(job.cancel())
        try:
            job.get(timeout=30)
        except JobCancelled as cancelled:
            print(f"get(): {cancelled}")
        print(f"final status: {job.status()}")
    finally:
        worker.stop()
        thread.join()
        app.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
