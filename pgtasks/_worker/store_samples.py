"""The metrics a worker reads from the database, from every store of its app.

One :class:`QueueDepthSampler` per store samples that store every ``interval`` seconds on
a connection of its own (the store's replica when it has one), concurrently with the
others: a store that is down, slow or refusing delays no other store's sample. The
collectors serve the last sample of each store, labelled ``store``; a store whose last
sample failed is ``pgtasks_store_up{store} 0`` (its earlier numbers stay, with their
``pgtasks_queue_depth_sampled_timestamp_seconds``) and each failed sample adds to
``pgtasks_store_sample_errors_total{store}``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from .._counters import every_counter
from .._durable_text import parked_by_queue
from .._errors import PgTasksError
from .connection import OwnConnection
from .services import ErrorLog

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from .._app.app import App

logger = logging.getLogger("pgtasks.metrics")

#: A depth query that takes longer than this is cancelled (and logged).
QUEUE_DEPTH_STATEMENT_TIMEOUT_MS = 10_000

DepthRow = tuple[str, int, int] | tuple[str, int, int, int] | tuple[str, int, int, int, float]


class QueueDepthCollector:
    """Serves the last queue-depth sample of each store; queues that emptied since report
    0; and each store's health (up, failed samples)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: By (store, queue).
        self._pending: dict[tuple[str, str], int] = {}
        self._running: dict[tuple[str, str], int] = {}
        self._waiting: dict[tuple[str, str], int] = {}
        self._oldest: dict[tuple[str, str], float] = {}
        self._sampled_at: dict[str, float] = {}
        self._up: dict[str, bool] = {}
        self._errors: dict[str, int] = {}
        self._workers: dict[str, tuple[int, int]] = {}
        #: Parked jobs by (store, queue, state): sleeping, waiting, snoozed.
        self._parked: dict[tuple[str, str, str], int] = {}

    def update(
        self, depths: Iterable[DepthRow], expected: Iterable[str] = (), store: str = "default"
    ) -> None:
        """Replace ``store``'s sample with ``(queue, pending, running[, waiting[, oldest
        due age]])`` rows."""
        with self._lock:
            known = [queue for (name, queue) in self._pending if name == store]
            zeros = {(store, queue): 0 for queue in [*known, *expected]}
            pending, running, waiting = dict(zeros), dict(zeros), dict(zeros)
            oldest = {key: 0.0 for key in zeros}
            for queue_name, pending_count, running_count, *rest in depths:
                key = (store, queue_name)
                pending[key], running[key] = pending_count, running_count
                waiting[key] = int(rest[0]) if rest else 0
                oldest[key] = float(rest[1]) if len(rest) > 1 else 0.0
            tables: list[tuple[dict[tuple[str, str], Any], dict[tuple[str, str], Any]]] = [
                (self._pending, pending),
                (self._running, running),
                (self._waiting, waiting),
                (self._oldest, oldest),
            ]
            for table, new in tables:
                for key in [key for key in table if key[0] == store]:
                    del table[key]
                table.update(new)
            self._sampled_at[store] = time.time()
            self._up[store] = True

    def update_parked(self, store: str, parked: Mapping[str, Mapping[str, int]]) -> None:
        """Replace ``store``'s parked counts (``{queue: {state: jobs}}``); a count seen
        before and absent now reports 0."""
        with self._lock:
            for key in [key for key in self._parked if key[0] == store]:
                self._parked[key] = 0
            for queue, states in parked.items():
                for state, jobs in states.items():
                    self._parked[(store, queue, state)] = jobs

    def update_workers(self, store: str, live: int, silent: int) -> None:
        with self._lock:
            self._workers[store] = (live, silent)

    def failed(self, store: str) -> None:
        """A sample of ``store`` failed: it is down until a sample succeeds."""
        with self._lock:
            self._up[store] = False
            self._errors[store] = self._errors.get(store, 0) + 1

    def collect(self) -> Iterable[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self._lock:
            pending, running = dict(self._pending), dict(self._running)
            waiting, sampled_at = dict(self._waiting), dict(self._sampled_at)
            oldest = dict(self._oldest)
            up, errors = dict(self._up), dict(self._errors)
            workers, parked = dict(self._workers), dict(self._parked)
        labels = ["store", "queue"]
        depth = GaugeMetricFamily(
            "pgtasks_queue_depth",
            "Pending jobs that are due, per store and queue (sampled from the database).",
            labels=labels,
        )
        busy = GaugeMetricFamily(
            "pgtasks_queue_running_jobs",
            "Running jobs per store and queue, held by any worker (sampled).",
            labels=labels,
        )
        steps = GaugeMetricFamily(
            "pgtasks_queue_waiting_jobs",
            "Workflow steps waiting for earlier steps, per store and queue (sampled).",
            labels=labels,
        )
        age = GaugeMetricFamily(
            "pgtasks_queue_oldest_due_age_seconds",
            "Seconds the oldest due pending job of the queue has waited since its run_at,"
            " per store and queue (0: none due; sampled).",
            labels=labels,
        )
        for key in sorted(pending):
            depth.add_metric(list(key), pending[key])
            busy.add_metric(list(key), running.get(key, 0))
            steps.add_metric(list(key), waiting.get(key, 0))
            age.add_metric(list(key), oldest.get(key, 0.0))
        yield depth
        yield busy
        yield steps
        yield age
        asleep = GaugeMetricFamily(
            "pgtasks_queue_parked_jobs",
            "Pending jobs parked by a durable sleep, a wait for an event or a snooze, per"
            " store, queue and state: sleeping, waiting, snoozed (sampled).",
            labels=["store", "queue", "state"],
        )
        for parked_key in sorted(parked):
            asleep.add_metric(list(parked_key), parked[parked_key])
        yield asleep
        stamp = GaugeMetricFamily(
            "pgtasks_queue_depth_sampled_timestamp_seconds",
            "Unix time of the last successful sample of each store.",
            labels=["store"],
        )
        for store in sorted(sampled_at):
            stamp.add_metric([store], sampled_at[store])
        yield stamp
        store_up = GaugeMetricFamily(
            "pgtasks_store_up",
            "1 when the last sample of the store succeeded, 0 when it failed (down, refusing"
            " or too slow).",
            labels=["store"],
        )
        for store in sorted(up):
            store_up.add_metric([store], 1.0 if up[store] else 0.0)
        yield store_up
        failures = CounterMetricFamily(
            "pgtasks_store_sample_errors",
            "Samples of the store that failed (it could not be reached or did not answer).",
            labels=["store"],
        )
        for store in sorted(up):
            failures.add_metric([store], errors.get(store, 0))
        yield failures
        registered = GaugeMetricFamily(
            "pgtasks_store_workers",
            "Registered workers of the store, every process: live (a heartbeat within the"
            " lease) or silent (past it, not yet removed by a rescuer); sampled.",
            labels=["store", "state"],
        )
        for store in sorted(workers):
            live, silent = workers[store]
            registered.add_metric([store, "live"], live)
            registered.add_metric([store, "silent"], silent)
        yield registered


class SchemaCountersCollector:
    """Serves the last sample of each store's counters (every process's totals)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[str, dict[str, int]] = {}
        self._flow: dict[str, dict[str, int]] = {}

    def update(self, totals: Mapping[str, int], store: str = "default") -> None:
        with self._lock:
            self._totals[store] = every_counter(totals)

    def update_flow(self, flow: Mapping[str, int], store: str = "default") -> None:
        """The fair keys and sequences of ``store`` now (KeyedQueries.count_keyed)."""
        with self._lock:
            self._flow[store] = dict(flow)

    def collect(self) -> Iterable[Metric]:
        from prometheus_client.core import CounterMetricFamily

        with self._lock:
            totals = dict(self._totals)
            flow = dict(self._flow)
        if flow:
            from prometheus_client.core import GaugeMetricFamily

            gauges = GaugeMetricFamily(
                "pgtasks_flow",
                "Fair keys with pending or running jobs (fair_keys), sequences with unfinished"
                " jobs (sequences), sequence jobs waiting for their turn"
                " (sequence_jobs_waiting), sequences held by a failed job (sequences_held);"
                " sampled with the queue depths.",
                labels=["store", "what"],
            )
            for store in sorted(flow):
                for what, value in sorted(flow[store].items()):
                    gauges.add_metric([store, what], value)
            yield gauges
        if not totals:
            return
        family = CounterMetricFamily(
            "pgtasks_schema_events",
            "How often the guarantees were exercised, every process, stored in each store's"
            " database (sampled with the queue depths).",
            labels=["store", "event"],
        )
        for store in sorted(totals):
            for name, value in totals[store].items():
                family.add_metric([store, name], value)
        yield family


class QueueDepthSampler:
    """A thread that samples one store's queue depths and counters every ``interval``
    seconds on its own connection (``app``: the App of that store)."""

    def __init__(
        self,
        app: App,
        queues: Sequence[str] | None,
        collector: QueueDepthCollector,
        *,
        interval: float,
        name: str,
        counters: SchemaCountersCollector | None = None,
    ) -> None:
        self.app = app
        self.store_name = app.store_name
        self.queues = list(queues) if queues is not None else None
        self.collector = collector
        self.counters = counters
        self.interval = interval
        self.name = name
        self.stopping = threading.Event()
        self.errors = ErrorLog(f"metrics sampler of worker {name}, store {self.store_name}")
        self.thread = threading.Thread(
            target=self._run, name=f"pgtasks-metrics-{self.store_name}", daemon=True
        )
        # The replica when the store has one (a sample may lag), else its dsn; READ
        # COMMITTED whatever the default (Database.connect pins it).
        self._connection = OwnConnection(
            lambda: app.database.connect(
                replica=True, application_name=f"pgtasks metrics {name}"[:63]
            )
        )

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout)

    def sample_once(self) -> None:
        conn = self._connection.get()
        store = self.app.queries
        with conn.transaction():
            store.limit_statement_time(conn, QUEUE_DEPTH_STATEMENT_TIMEOUT_MS / 1000)
            depths = store.get_queue_depths(conn, self.queues)
            live, silent = store.count_workers(conn, self.app.lease_timeout)
            parked = parked_by_queue(store.count_parked_jobs(conn))  # jobs_parked_idx
        self.collector.update(
            ((d.queue, d.pending, d.running, d.waiting, d.oldest_due_age or 0.0) for d in depths),
            expected=self.queues or (),
            store=self.store_name,
        )
        self.collector.update_workers(self.store_name, live, silent)
        wanted = self.queues
        self.collector.update_parked(
            self.store_name,
            {queue: states for queue, states in parked.items() if not wanted or queue in wanted},
        )
        if self.counters is not None:
            self.counters.update(store.get_counters(conn), store=self.store_name)
            self.counters.update_flow(store.count_keyed(conn), store=self.store_name)

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.sample_once()
                self.errors.recovered()
            except (psycopg.Error, PgTasksError) as error:
                self.collector.failed(self.store_name)
                self.errors.failed(error)
                self._connection.drop()
            except Exception:
                self.collector.failed(self.store_name)
                logger.exception(
                    "metrics sampler of worker %s, store %s failed; continuing",
                    self.name,
                    self.store_name,
                )
            self.stopping.wait(self.interval)
        self._connection.drop()


def samplers_of(
    app: App,
    queues: Sequence[str] | None,
    collector: QueueDepthCollector,
    counters: SchemaCountersCollector,
    *,
    interval: float,
    name: str,
) -> list[QueueDepthSampler]:
    """A sampler of each store of ``app``'s root App: ``queues`` (None: every queue) are
    sampled in the store each routes to; every store's health and counters are sampled."""
    root = app.root
    views = (
        [app] if root.store_router.single else [root.for_store(n) for n in root.store_router.names]
    )
    return [
        QueueDepthSampler(
            view,
            None
            if queues is None
            else [queue for queue in queues if root.store_of_queue(queue) == view.store_name],
            collector,
            interval=interval,
            name=name,
            counters=counters,
        )
        for view in views
    ]
