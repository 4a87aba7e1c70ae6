"""Job metadata and progress: tag a job at enqueue, report progress while it runs, read
both from its handle, and see the history of its failed attempts.

    python -m examples.metadata

Runs a worker in this process (``pgtasks.Worker``).
"""

from __future__ import annotations

import os
import threading
import time

from pgtasks import App, JobContext, Worker

# A schema of its own: this example never meets the jobs of your own workers (nor
# they its jobs). PGTASKS_EXAMPLE_SCHEMA moves it (the test suite does).
app = App(schema=os.environ.get("PGTASKS_EXAMPLE_SCHEMA", "examples_metadata"))


@app.task(bind=True, max_attempts=3, retry_backoff=0.05, retry_jitter=False)
def import_rows(ctx: JobContext, rows: int) -> int:
    if ctx.attempt == 1:
        raise ConnectionError("the source database went away")
    print(f"task: importing for {ctx.meta['customer']!r} (attempt {ctx.attempt})")
    for done in range(0, rows + 1, 25):
        ctx.set_progress(done, rows, message=f"{done} rows imported")
        time.sleep(0.1)  # a chunk of work
    ctx.update_meta(source="legacy-db")
    return rows


def main() -> int:
    app.migrate()
    worker = Worker(app, concurrency=2)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        job = import_rows.apply_async(kwargs={"rows": 100}, meta={"customer": "acme"})
        print(f"meta at enqueue: {job.meta}")
        seen = set()
        deadline = time.monotonic() + 30
        while not job.status().is_finished and time.monotonic() < deadline:
            progress = job.refresh().progress  # refresh(): read the row now
            if progress is not None and progress.current not in seen:
                seen.add(progress.current)
                print(f"progress: {progress.fraction:.0%} ({progress.message})")
            time.sleep(0.02)
        print(f"result: {job.get(timeout=30)} rows")
        job.refresh()
        user_meta = {k: v for k, v in sorted(job.meta.items()) if not k.startswith("pgtasks.")}
        print(f"user meta: {user_meta}")
        for failure in job.attempts_history:
            print(
                f"attempt {failure.attempt} failed on worker {failure.worker_id}:"
                f" {failure.exception_type}"
            )
        print(f"succeeded on worker {job.worker_id}, first started {job.started_at:%H:%M:%S}")
    finally:
        worker.stop()
        thread.join()
        app.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
