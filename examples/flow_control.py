"""Pause a queue while a worker is busy with it, then resume it.

    python -m examples.flow_control

Runs a worker in this process (``pgtasks.Worker``) on two queues. ``emails`` is paused
while its first job runs: that job finishes, the next ``emails`` jobs wait while the
``default`` queue carries on, and ``resume_queue`` lets them run. ``pgtasks queues
pause|resume|list`` does the same from a shell, for every worker of the schema.
"""

from __future__ import annotations

import os
import threading
import time

from pgtasks import App, Worker

# A schema of its own: this example never meets the jobs of your own workers (nor
# they its jobs). PGTASKS_EXAMPLE_SCHEMA moves it (the test suite does).
app = App(schema=os.environ.get("PGTASKS_EXAMPLE_SCHEMA", "examples_flow_control"))
first_started = threading.Event()
first_may_finish = threading.Event()


@app.task(queue="emails")
def send_newsletter(batch: int) -> str:
    if batch == 0:
        first_started.set()
        first_may_finish.wait(30)
    return f"batch {batch} sent"


@app.task
def resize_image(image_id: int) -> str:
    return f"image {image_id} resized"


def main() -> int:
    app.migrate()
    worker = Worker(app, concurrency=2, poll_interval=0.2)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        first = send_newsletter.delay(0)
        first_started.wait(30)
        print(f"pause emails: {app.pause_queue('emails')}")
        print(f"paused queues: {app.paused_queues()}")
        while "emails" not in worker.paused_queues:  # at most one poll interval
            time.sleep(0.02)

        waiting = [send_newsletter.delay(batch) for batch in (1, 2)]
        image = resize_image.delay(7)
        print(f"default queue carries on: {image.get(timeout=30)}")
        print(f"emails jobs while paused: {[job.status().value for job in waiting]}")

        first_may_finish.set()
        print(f"the running job finishes: {first.get(timeout=30)}")

        print(f"resume emails: {app.resume_queue('emails')}")
        print(f"after resume: {[job.get(timeout=30) for job in waiting]}")
    finally:
        first_may_finish.set()
        worker.stop()
        thread.join()
        app.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
