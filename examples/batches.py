"""Debounce a burst of enqueues into one job, and run jobs in batches.

    python -m examples.batches

``reindex`` is debounced: fifty enqueues within a second make one job, which runs once,
with the last arguments, half a second after the last enqueue. ``send_push`` is a batch
task: its handler receives up to 100 jobs at a time and decides each job's outcome; the
push to user 13 fails the first time and only that job is retried. A worker runs in this
process (``pgtasks.Worker``); ``pgtasks limits`` shows the same figures from a shell.
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta

from pgtasks import App, Batch, BatchJob, Worker

# A schema of its own: this example never meets the jobs of your own workers (nor
# they its jobs). PGTASKS_EXAMPLE_SCHEMA moves it (the test suite does).
app = App(schema=os.environ.get("PGTASKS_EXAMPLE_SCHEMA", "examples_batches"))
handler_calls: list[int] = []
lock = threading.Lock()


@app.task(debounce=timedelta(seconds=0.5), debounce_key=lambda index, **_: index)
def reindex(index: str, requested: int) -> str:
    return f"{index} reindexed once, for request {requested}"


@app.task(batch=Batch(max_size=100, max_wait=timedelta(seconds=0.2)), retry_backoff=0.1)
def send_push(jobs: list[BatchJob]) -> None:
    with lock:
        handler_calls.append(len(jobs))
    for job in jobs:
        with job.outcome():  # an exception here ends this job's attempt only
            user = job.kwargs["user"]
            if user == 13 and job.attempt == 1:
                raise ConnectionError("push gateway timed out for user 13")
            job.done(f"user {user} notified on attempt {job.attempt}")


def main() -> int:
    app.migrate()
    handles = [reindex.delay("products", requested=n) for n in range(50)]
    print(f"50 enqueues, distinct jobs: {len({handle.id for handle in handles})}")
    pushes = send_push.delay_many([{"user": user} for user in range(250)])

    worker = Worker(app, concurrency=2, poll_interval=0.2)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        print(f"reindex: {handles[-1].get(timeout=30)}")
        results = [push.get(timeout=30) for push in pushes]
        print(f"pushes done: {len(results)}; {results[13]}; {results[14]}")
        print(f"handler calls: {len(handler_calls)}, largest batch: {max(handler_calls)}")
        row = pushes[13].fetch()
        error = row.attempts_history[0].error.splitlines()[-1]  # the traceback's last line
        print(f"user 13 attempts: {row.attempts}, first error: {error}")
    finally:
        worker.stop()
        thread.join(30)
        app.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
