"""Many tenants on one queue: fair queuing, strict order per key, priority aging.

    python -m examples.tenants

Runs one worker in this process (``pgtasks.Worker``, four slots). Tenant ``acme`` imports
400 rows, then tenant ``tiny`` enqueues 5: with ``fair_key=`` the tenants take turns, so
tiny's rows start long before acme's import ends. A customer's ledger entries apply one at
a time, in the order they were enqueued, whatever their priority (``sequence_key=``); a
failed entry holds the rest of that customer's ledger until it is dealt with, and other
customers go on. ``priority_aging=`` raises a waiting job's priority one level per
interval, so low-priority work is not starved by a steady stream of urgent work.
``pgtasks limits`` shows the busiest and starved fair keys and the sequences.
"""

from __future__ import annotations

import os
import threading
import time

from pgtasks import App, JobStatus, Worker, flow_state, release_sequence

# A schema of its own: this example never meets the jobs of your own workers (nor
# they its jobs). PGTASKS_EXAMPLE_SCHEMA moves it (the test suite does).
app = App(
    schema=os.environ.get("PGTASKS_EXAMPLE_SCHEMA", "examples_tenants"),
    priority_aging=1.0,  # one priority level per second waited
)

_lock = threading.Lock()
_started: list[str] = []
_applied: list[tuple[str, int]] = []


@app.task(fair_key=lambda tenant, row: tenant)
def import_row(tenant: str, row: int) -> None:
    with _lock:
        _started.append(tenant)
    time.sleep(0.002)


@app.task(sequence_key=lambda customer, entry: customer, max_attempts=1)
def apply_entry(customer: str, entry: int) -> None:
    if (customer, entry) == ("bob", 2):
        raise ValueError("entry 2 of bob does not balance")
    with _lock:
        _applied.append((customer, entry))
    time.sleep(0.01)


def main() -> int:
    app.migrate()
    worker = Worker(app, concurrency=4)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        acme = import_row.delay_many([{"tenant": "acme", "row": n} for n in range(400)])
        tiny = import_row.delay_many([{"tenant": "tiny", "row": n} for n in range(5)])
        for job in tiny:
            job.get(timeout=30)
        with _lock:
            before = _started.count("acme")
        print(f"tiny's 5 rows all started after {before} of acme's 400 (fair_key)")
        # Priorities do not reorder a sequence: entries apply in enqueue order.
        entries = [
            apply_entry.apply_async((customer, n), priority=n)
            for customer in ("ann", "bob")
            for n in range(4)
        ]
        for job in entries[:4] + entries[4:6]:
            job.get(timeout=30)
        failed = entries[6]
        while failed.status() != JobStatus.FAILED:
            time.sleep(0.05)
        print(f"ann's entries applied in order: {[n for c, n in _applied if c == 'ann']}")
        state = flow_state(app)
        held = [(s.key, s.waiting) for s in state.held]
        print(f"held by a failed entry: {held} (bob's entry 3 waits)")
        release_sequence(app, "bob")  # skip the failed entry: the next one applies
        entries[7].get(timeout=30)
        print(f"bob's entries applied: {[n for c, n in _applied if c == 'bob']}")
        for job in acme:
            job.get(timeout=60)
    finally:
        worker.stop()
        thread.join()
        app.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
