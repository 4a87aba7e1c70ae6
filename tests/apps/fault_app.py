"""The app the fault suite runs in real ``pgtasks worker`` and ``pgtasks beat`` processes.

Configured from the environment: ``PGTASKS_DSN`` and ``PGTASKS_TEST_SCHEMA``. Intervals
come from the CLI flags of ``tests.support.processes``. Every task records each execution
(job id, attempt, worker id, pid, started, finished) in ``<schema>.executions`` on its own
connection (the Recorder of ``tests.apps.worker_app``), so invariants can be checked in
SQL after any fault (``tests.support.probe.assert_invariants``).
"""

from __future__ import annotations

import dataclasses
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from pgtasks import App, Batch, BatchJob, JobContext
from tests.apps import lazy_app
from tests.apps._environment import environment_app
from tests.apps.worker_app import Recorder, register_tasks

#: The per-second schedule beats of the fault suite run.
EVERY_SECOND = "fault-every-second"


@dataclasses.dataclass(frozen=True)
class FaultTasks:
    noop: Any
    sleep: Any
    wait_for_file: Any
    poison: Any
    fail_after_file: Any
    payload: Any
    leak_transaction: Any
    enqueue_noop: Any
    tick: Any
    collect: Any
    batch_until_file: Any
    batch_one_fails: Any


def register_batch_tasks(app: App, recorder: Recorder) -> tuple[Any, Any]:
    """Two batch tasks: ``fault_app.batch_until_file`` (records every job's run and waits
    for the file its jobs name) and ``fault_app.batch_one_fails``."""

    @app.task(
        name="fault_app.batch_until_file",
        batch=Batch(max_size=500, max_wait=timedelta(seconds=0.5)),
    )
    def batch_until_file(jobs: list[BatchJob]) -> None:
        """Record every job's run, wait for the file its jobs name, then end them all."""
        runs = [recorder.started_lease(job.id, job.attempt, job.worker_id) for job in jobs]
        path = Path(jobs[0].kwargs["path"])
        deadline = time.monotonic() + 30.0
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        for execution_id in runs:
            recorder.finished(execution_id)

    @app.task(
        name="fault_app.batch_one_fails",
        batch=Batch(max_size=500, max_wait=timedelta(seconds=1)),
        retry_backoff=0.1,
        retry_jitter=False,
    )
    def batch_one_fails(jobs: list[BatchJob]) -> None:
        """Every job's run recorded; the job with fail=True raises at its first attempt."""
        for job in jobs:
            execution_id = recorder.started_lease(job.id, job.attempt, job.worker_id)
            with job.outcome():
                if job.kwargs.get("fail") and job.attempt == 1:
                    raise ConnectionError(f"gateway refused job {job.id}")
            recorder.finished(execution_id)

    return batch_until_file, batch_one_fails


def register_fault_tasks(app: App) -> FaultTasks:
    """Register every task under fixed names (``worker_app.*`` and ``fault_app.*``)."""
    base = register_tasks(app)
    recorder = Recorder(app)
    batches = register_batch_tasks(app, recorder)

    @app.task(bind=True, name="fault_app.poison", max_attempts=3)
    def poison(context: JobContext) -> None:
        """Kill the whole worker process, every time (a segfaulting extension, an OOM kill)."""
        recorder.instant(context)
        os._exit(137)

    @app.task(bind=True, name="fault_app.fail_after_file")
    def fail_after_file(context: JobContext, path: str, timeout: float = 30.0) -> None:
        """Wait for ``path``, then raise (a failure outcome written late)."""
        execution_id = recorder.started(context)
        deadline = time.monotonic() + timeout
        while not Path(path).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        recorder.finished(execution_id)
        raise RuntimeError("failing on purpose after the file appeared")

    @app.task(bind=True, name="fault_app.payload")
    def payload(context: JobContext, blob: str) -> int:
        recorder.instant(context)
        return len(blob)

    @app.task(bind=True, name="fault_app.leak_transaction")
    def leak_transaction(context: JobContext, seconds: float) -> None:
        """Take every pooled connection, open a transaction on each and hold them."""
        recorder.instant(context)
        held = []
        for _ in range(app.pool_max_size):
            manager = app.connection()
            conn = manager.__enter__()
            conn.execute("SELECT 1")  # inside a transaction the task never ends
            held.append((manager, conn))
        time.sleep(seconds)

    @app.task(bind=True, name="fault_app.enqueue_noop", max_attempts=1)
    def enqueue_noop(context: JobContext) -> int:
        """Enqueue another job through the app's pool (fails clearly when it is exhausted)."""
        recorder.instant(context)
        return int(base.noop.delay().id)

    @app.task(bind=True, name="fault_app.collect")
    def collect(context: JobContext, values: list[Any]) -> list[Any]:
        """A chord callback: returns the results it received."""
        recorder.instant(context)
        return values

    @app.periodic(every=timedelta(seconds=1), name=EVERY_SECOND)
    @app.task(bind=True, name="fault_app.tick")
    def tick(context: JobContext) -> None:
        recorder.instant(context)

    return FaultTasks(
        noop=base.noop,
        sleep=base.sleep,
        wait_for_file=base.wait_for_file,
        poison=poison,
        fail_after_file=fail_after_file,
        payload=payload,
        leak_transaction=leak_transaction,
        enqueue_noop=enqueue_noop,
        tick=tick,
        collect=collect,
        batch_until_file=batches[0],
        batch_one_fails=batches[1],
    )


def build_app() -> App:
    app = environment_app(
        connect_timeout=float(os.environ.get("PGTASKS_TEST_CONNECT_TIMEOUT", "2")),
        pool_max_size=int(os.environ.get("PGTASKS_TEST_POOL_MAX", "4")),
        prune_interval=float(os.environ.get("PGTASKS_TEST_PRUNE_INTERVAL", "60")),
        heal_interval=float(os.environ.get("PGTASKS_TEST_HEAL_INTERVAL", "30")),
    )
    register_fault_tasks(app)
    return app


#: ``app`` is built on first access, so importing this module needs no environment.
__getattr__ = lazy_app(build_app, __name__)
