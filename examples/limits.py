"""Concurrency and rate limits across workers.

    python -m examples.limits

Runs two workers in this process (``pgtasks.Worker``), eight slots each, at their default
settings. ``sync_account`` runs at most one job per user at a time (``concurrency_key``),
``build_report`` at most two at a time in its queue (``app.queue``), and
``call_partner_api`` starts at most 10 jobs per second. The limits live in the database, so
they hold for every worker of the schema, in any number of processes: ``pgtasks limits``
shows them with their running jobs. A freed slot is taken at once and the rate is reached
without a shorter poll interval: a worker sleeps until its next token is due.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

from pgtasks import App, Worker

# A schema of its own: this example never meets the jobs of your own workers (nor
# they its jobs). PGTASKS_EXAMPLE_SCHEMA moves it (the test suite does).
app = App(schema=os.environ.get("PGTASKS_EXAMPLE_SCHEMA", "examples_limits"))
app.queue("reports", concurrency=2)

_lock = threading.Lock()
_running: Counter[str] = Counter()
_peak: Counter[str] = Counter()


def _enter(group: str) -> None:
    with _lock:
        _running[group] += 1
        _peak[group] = max(_peak[group], _running[group])


def _leave(group: str) -> None:
    with _lock:
        _running[group] -= 1


@app.task(concurrency_key=lambda user_id, **_: user_id, concurrency=1)
def sync_account(user_id: int, page: int) -> None:
    _enter(f"user {user_id}")
    time.sleep(0.05)
    _leave(f"user {user_id}")


@app.task(queue="reports")
def build_report(report_id: int) -> None:
    _enter("reports")
    time.sleep(0.05)
    _leave("reports")


@app.task(rate_limit="10/s")
def call_partner_api(request_id: int) -> float:
    return time.monotonic()


def main() -> int:
    app.migrate()
    workers = [Worker(app, concurrency=8) for _ in range(2)]
    threads = [threading.Thread(target=worker.run) for worker in workers]
    for thread in threads:
        thread.start()
    try:
        syncs = sync_account.delay_many(
            [{"user_id": user, "page": page} for user in (1, 2, 3) for page in range(4)]
        )
        reports = build_report.delay_many([{"report_id": n} for n in range(6)])
        calls = call_partner_api.delay_many([{"request_id": n} for n in range(12)])
        for job in syncs + reports:
            job.get(timeout=30)
        started = sorted(job.get(timeout=30) for job in calls)
        print(f"most jobs of one user at once: {max(_peak[f'user {u}'] for u in (1, 2, 3))}")
        print(f"most reports at once: {_peak['reports']}")
        # The bucket holds two tokens at 10/s: two calls at once, then one each 0.1 s.
        print(f"12 API calls at 10/s took {started[-1] - started[0]:.1f} s (at least 1.0 s)")
    finally:
        for worker in workers:
            worker.stop()
        for thread in threads:
            thread.join()
        app.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
