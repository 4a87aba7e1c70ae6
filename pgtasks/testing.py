"""Helpers for testing code that uses pgtasks, and a pytest plugin.

:func:`run_until_empty` runs a real worker in this process until the queues are
drained. :func:`isolated_schema` makes a migrated throwaway schema and
:func:`use_test_database` points an existing :class:`~pgtasks.App` (the one your module
creates at import time) at it for a block. With pytest, the plugin (installed as a
``pytest11`` entry point; ``pytest_plugins = ["pgtasks.testing"]`` says so explicitly)
gives the fixtures ``pgtasks_dsn``, ``pgtasks_schema``, ``pgtasks_isolate`` and
``pgtasks_app_factory``; it adds no hooks. See docs/howto/testing.md.

Importing this module does not import pytest: the fixtures live in
``pgtasks._pytest_plugin``, which pytest loads through ``pytest_plugins`` below.

PYTEST_DONT_REWRITE (no assertions here; lets conftest files import it before pytest
loads it as a plugin)
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import psycopg

from ._app.app import App
from ._store.connecting import PINNED
from ._store.migrator import Migrator
from ._store.queries import Queries
from ._validation import positive_seconds, schema_name
from ._worker.events import WorkerEvents
from ._worker.metrics import outcome_series
from ._worker.worker import Worker

if TYPE_CHECKING:
    from ._leases import ClaimedJob

__all__ = ["RunSummary", "isolated_schema", "run_until_empty", "use_test_database"]

#: The fixtures, loaded by pytest when it loads this module as a plugin.
pytest_plugins = ["pgtasks._pytest_plugin"]

#: Seconds between checks of the database while ``run_until_empty`` waits.
CHECK_INTERVAL = 0.02


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """What :func:`run_until_empty` saw its worker do.

    ``succeeded``/``retried``/``failed``/``cancelled`` count attempts the way the
    metrics do; ``outcomes`` counts them by raw outcome (``done``, ``retry``,
    ``failed``, ``discarded``, ``timeout``, ``cancelled``). ``scheduled`` is the number
    of pending jobs of the queues that were not due yet when it stopped (future
    ``run_at``, retries waiting for their backoff): they were not waited for.
    """

    started: int
    succeeded: int
    retried: int
    failed: int
    cancelled: int
    scheduled: int
    seconds: float
    outcomes: Mapping[str, int] = dataclasses.field(default_factory=dict)

    @property
    def finished(self) -> int:
        """Attempts that left their job done, failed or cancelled."""
        return self.succeeded + self.failed + self.cancelled


class _Tally(WorkerEvents):
    """Counts a worker's events and wakes ``run_until_empty`` after each one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started_event = threading.Event()
        self.changed = threading.Event()
        self.started = 0
        self.series: dict[str, int] = {}
        self.outcomes: dict[str, int] = {}

    def worker_started(self, worker: Worker) -> None:
        self.started_event.set()

    def job_started(self, job: ClaimedJob) -> None:
        with self.lock:
            self.started += 1

    def job_finished(self, job: ClaimedJob, outcome: str, duration: float) -> None:
        series = outcome_series(outcome, job)
        with self.lock:
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
            if series is not None:
                self.series[series] = self.series.get(series, 0) + 1
        self.changed.set()

    def summary(self, scheduled: int, seconds: float) -> RunSummary:
        with self.lock:
            return RunSummary(
                started=self.started,
                succeeded=self.series.get("succeeded", 0),
                retried=self.series.get("retried", 0),
                failed=self.series.get("failed", 0),
                cancelled=self.series.get("cancelled", 0),
                scheduled=scheduled,
                seconds=seconds,
                outcomes=dict(self.outcomes),
            )


def _outstanding(app: App, queues: Sequence[str] | None) -> tuple[int, int]:
    """(pending due, running) jobs of ``queues`` as the database sees them now."""
    with app.connection() as conn:
        depths = app.queries.get_queue_depths(conn, queues)
    return sum(depth.pending for depth in depths), sum(depth.running for depth in depths)


def _count_scheduled(app: App, queues: Sequence[str] | None) -> int:
    with app.connection() as conn:
        return app.queries.count_scheduled_jobs(conn, queues)


def run_until_empty(
    app: App,
    *,
    timeout: float = 30.0,
    queues: Sequence[str] | None = None,
    concurrency: int = 4,
    poll_interval: float = 0.05,
) -> RunSummary:
    """Run a worker in a thread of this process until ``queues`` (None: all) are drained.

    Drained means the database holds no pending job that is due and no running job in
    those queues; jobs the tasks enqueue meanwhile are run too. Jobs due later (a future
    ``run_at``, a retry's backoff) are not waited for; ``RunSummary.scheduled`` counts
    them. The worker then stops and the summary is returned. After ``timeout`` seconds
    the worker stops, releasing the jobs it still runs back to pending, and
    ``TimeoutError`` is raised. Errors that keep the worker from starting (schema not
    migrated, database unreachable) are raised as they are.
    """
    positive_seconds("timeout=", timeout)
    tally = _Tally()
    worker = Worker(
        app,
        queues,
        concurrency=concurrency,
        poll_interval=poll_interval,
        shutdown_timeout=0.0,
        observers=[tally],
    )
    failures: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as error:
            failures.append(error)
        finally:
            tally.started_event.set()
            tally.changed.set()

    started = time.monotonic()
    deadline = started + float(timeout)
    thread = threading.Thread(target=run, name="pgtasks-run-until-empty", daemon=True)
    thread.start()
    try:
        tally.started_event.wait(max(0.0, deadline - time.monotonic()))
        while not failures:
            if not thread.is_alive():
                raise RuntimeError("the worker of run_until_empty stopped on its own")
            pending, running = _outstanding(app, worker.queues)
            if not pending and not running:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"run_until_empty: after {timeout:g} s, {pending} due pending and"
                    f" {running} running job(s) remain in"
                    f" {', '.join(worker.queues) if worker.queues else 'all queues'}"
                )
            tally.changed.wait(min(CHECK_INTERVAL, remaining))
            tally.changed.clear()
    finally:
        # Not waiting in stop(): join() does, and also when run() failed before its loop.
        worker.stop(timeout=0.0, wait=False)
        thread.join(30.0)
    if failures:
        raise failures[0]
    return tally.summary(_count_scheduled(app, worker.queues), time.monotonic() - started)


@contextlib.contextmanager
def isolated_schema(dsn: str, *, prefix: str = "pgtasks_test_") -> Iterator[str]:
    """A freshly migrated schema named ``<prefix><random hex>``, dropped on exit."""
    schema = schema_name(f"{prefix}{secrets.token_hex(4)}")
    store = Queries(schema)
    # READ COMMITTED whatever the server's default, as every pgtasks connection.
    with psycopg.connect(dsn, autocommit=True, options=PINNED) as conn:
        Migrator(store).migrate(conn)
    try:
        yield schema
    finally:
        with psycopg.connect(dsn, autocommit=True, options=PINNED) as conn:
            store.drop_schema(conn)


@contextlib.contextmanager
def use_test_database(app: App, dsn: str, schema: str) -> Iterator[App]:
    """Point ``app`` at ``dsn`` and ``schema`` inside the block, then put it back.

    For the App your code creates at import time: its tasks, handles and workers use
    the test database inside the block. Its connection pools are closed on entry and
    on exit, so no connection to either database outlives the switch. Not for use
    while a worker of ``app`` is running.
    """
    saved = app.use_database(dsn, schema_name(schema))
    try:
        yield app
    finally:
        app.restore_database(saved)
