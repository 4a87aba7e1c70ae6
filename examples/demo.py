"""The README demo: a worker process, a producer and a live progress view.

    python3 dev.py demo        (or: python -m examples.demo)

Starts (or reuses) the embedded PostgreSQL unless PGTASKS_DSN is set, migrates, starts
`pgtasks worker` as a real subprocess, enqueues a mix of jobs (immediate, delayed,
failing-then-succeeding, always failing, async, a bulk batch), prints progress until
every job is finished, prints a summary, stops the worker with SIGTERM and exits 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta

from pgtasks import JobRow, JobStatus

from .app import (
    app,
    charge_card,
    fetch_exchange_rate,
    resize_image,
    send_welcome_email,
    sync_with_partner,
)

TIMEOUT = 120.0


def start_process(*arguments: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "pgtasks", *arguments, "-A", "examples.app:app"],
        env={**os.environ, "PGTASKS_DSN": app.dsn},
    )


def enqueue() -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    groups["immediate"] = [
        send_welcome_email.delay(f"user{n}@example.com", name=f"User {n}").id for n in range(20)
    ]
    groups["delayed 2 s"] = [
        resize_image.apply_at(timedelta(seconds=2), image_id=n).id for n in range(5)
    ]
    groups["flaky (succeeds on attempt 3)"] = [
        sync_with_partner.delay(account_id=n).id for n in range(5)
    ]
    groups["always failing"] = [charge_card.delay(payment_id=4000 + n).id for n in range(2)]
    groups["async"] = [fetch_exchange_rate.delay(c).id for c in ("EUR", "USD", "GBP")]
    started = time.perf_counter()
    bulk = resize_image.delay_many([{"image_id": n, "width": 128} for n in range(1000)])
    elapsed = time.perf_counter() - started
    print(f"bulk: enqueued {len(bulk)} jobs in one round trip in {elapsed * 1000:.1f} ms")
    groups["bulk batch"] = [handle.id for handle in bulk]
    return groups


def progress_line(rows: list[JobRow], total: int, elapsed: float) -> str:
    counts = Counter(row.status for row in rows)
    finished = sum(counts[status] for status in (JobStatus.DONE, JobStatus.FAILED))
    return (
        f"[{elapsed:5.1f}s] {finished}/{total} finished | pending {counts[JobStatus.PENDING]}"
        f" running {counts[JobStatus.RUNNING]} done {counts[JobStatus.DONE]}"
        f" failed {counts[JobStatus.FAILED]}"
    )


def summary(groups: dict[str, list[int]], rows: dict[int, JobRow], elapsed: float) -> None:
    print()
    print(f"{'group':32} {'jobs':>5} {'done':>5} {'failed':>6} {'retried':>7}")
    for name, ids in groups.items():
        group_rows = [rows[job_id] for job_id in ids]
        done = sum(row.status is JobStatus.DONE for row in group_rows)
        failed = sum(row.status is JobStatus.FAILED for row in group_rows)
        retried = sum(row.attempts > 1 for row in group_rows)
        print(f"{name:32} {len(ids):5} {done:5} {failed:6} {retried:7}")
    total = len(rows)
    print(f"{'total':32} {total:5}")
    print(f"\n{total} jobs finished in {elapsed:.2f} s ({total / elapsed:.0f} jobs/s end to end)")
    flaky = rows[groups["flaky (succeeds on attempt 3)"][0]]
    print(f"a flaky job's result: {flaky.result!r}")
    failed = rows[groups["always failing"][0]]
    last_line = (failed.last_error or "").strip().splitlines()[-1]
    print(f"a failed job's last error: {last_line}")


def main() -> int:
    applied = app.migrate()
    print(f"database: {app.describe_database()} (schema {app.schema!r}, {len(applied)} migrations)")
    worker = start_process("worker", "--concurrency", "8", "--log-level", "WARNING")
    try:
        started = time.perf_counter()
        groups = enqueue()
        ids = [job_id for group in groups.values() for job_id in group]
        while True:
            rows = app.get_jobs(ids)
            elapsed = time.perf_counter() - started
            print(progress_line(rows, len(ids), elapsed), flush=True)
            if all(row.status.is_finished for row in rows):
                break
            if elapsed > TIMEOUT or worker.poll() is not None:
                print("the demo did not finish: is the worker running?", file=sys.stderr)
                return 1
            time.sleep(0.5)
        summary(groups, {row.id: row for row in rows}, time.perf_counter() - started)
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=60)
        app.close()
    print(f"worker stopped with exit code {code}")
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
