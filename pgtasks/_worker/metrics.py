"""Prometheus metrics of a worker (``pip install 'pgtasks[metrics]'``).

:class:`WorkerMetrics` is a worker observer (``Worker(app, observers=[metrics])``) with
a ``CollectorRegistry`` of its own, so two workers in one process never share series.
Counters and histograms are updated from the worker's events; the busy-slot gauges
are read from the worker when Prometheus scrapes; queue depths are sampled every
``queue_depth_interval`` seconds from each store by a thread on a connection of its own
(to the store's replica when it has one).
``serve(port, host)`` exposes the registry over HTTP (``pgtasks worker --metrics-port``).

Series (``task`` and ``queue`` labels come from the job)::

    pgtasks_jobs_started_total{task,queue}      attempts handed to the executor
    pgtasks_jobs_succeeded_total{task,queue}    attempts that ended done
    pgtasks_jobs_retried_total{task,queue}      attempts that scheduled another attempt
    pgtasks_jobs_failed_total{task,queue}       attempts that left the job failed
    pgtasks_jobs_cancelled_total{task,queue}    attempts that ended cancelled
    pgtasks_job_duration_seconds{task,queue}    histogram: run time of an attempt
    pgtasks_job_start_latency_seconds{task,queue}
                                                histogram: claimed_at - max(run_at, created_at),
                                                database time (how long a due job waited)
    pgtasks_worker_busy_slots                   jobs running in this worker now
    pgtasks_worker_slots                        this worker's concurrency
    pgtasks_queue_depth{store,queue}            pending jobs that are due (sampled)
    pgtasks_queue_running_jobs{store,queue}     running jobs, all workers (sampled)
    pgtasks_queue_waiting_jobs{store,queue}     workflow steps waiting (sampled)
    pgtasks_queue_parked_jobs{store,queue,state}
                                                jobs parked by a durable sleep, a wait for
                                                an event or a snooze (sampled, through
                                                jobs_parked_idx)
    pgtasks_queue_oldest_due_age_seconds{store,queue}
                                                wait of the oldest due job (sampled)
    pgtasks_queue_depth_sampled_timestamp_seconds{store}
                                                when the store's last sample succeeded
    pgtasks_store_up{store}                     1: its last sample succeeded, 0: it failed
    pgtasks_store_sample_errors_total{store}    its failed samples
    pgtasks_store_workers{store,state}          registered workers: live or silent (sampled)
    pgtasks_worker_info{name,schema,store,queues,version}

Every store of the worker's app is sampled (store_samples.py), each on its own thread.

Counters of exercised guarantees (pgtasks._counters; docs/howto/metrics.md), as this
worker counted them::

    pgtasks_leases_lost_total                   attempts whose lease was lost before their
                                                outcome was written
    pgtasks_fenced_writes_refused_total         writes the lease fence refused
    pgtasks_jobs_rescued_total                  jobs this worker's rescuer returned from
                                                dead workers
    pgtasks_jobs_released_total                 jobs released at shutdown
    pgtasks_unknown_task_jobs_total             jobs of tasks its process could not run,
                                                released (never failed)
    pgtasks_enqueues_deduplicated_total         enqueues of this process answered by an
                                                existing job
    pgtasks_jobs_expired_total                  pending jobs this worker's expiry pass ended
                                                cancelled (start deadline passed)
    pgtasks_batch_size{task}                    jobs per batch of batch tasks (a histogram)

and every process's totals, stored in the database (sampled with the queue depths)::

    pgtasks_schema_events_total{store,event}    event: one of the counters' names
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .._counters import (
    ENQUEUES_DEDUPLICATED,
    EXPIRED,
    FENCED_WRITES_REFUSED,
    LEASE_LOST,
    RELEASED_AT_SHUTDOWN,
    RESCUED,
    UNKNOWN_TASK_JOBS,
)
from .._errors import ConfigurationError
from .._validation import positive_seconds
from .events import WorkerEvents
from .store_samples import (
    QUEUE_DEPTH_STATEMENT_TIMEOUT_MS,
    QueueDepthCollector,
    QueueDepthSampler,
    SchemaCountersCollector,
    samplers_of,
)

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.core import Metric

    from .._leases import ClaimedJob
    from .worker import Worker

logger = logging.getLogger("pgtasks.metrics")

__all__ = [
    "QUEUE_DEPTH_STATEMENT_TIMEOUT_MS",
    "QueueDepthCollector",
    "QueueDepthSampler",
    "SchemaCountersCollector",
    "WorkerMetrics",
]

#: Job run times: milliseconds to an hour.
DURATION_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0
)  # fmt: skip
#: Waits of due jobs: LISTEN wake-ups take milliseconds, a backlog minutes.
LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 900.0, 3600.0,
)  # fmt: skip
DEFAULT_QUEUE_DEPTH_INTERVAL = 15.0
JOB_LABELS = ("task", "queue")


def _require_prometheus() -> None:
    """prometheus_client is imported where it is used: this module loads without it."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ConfigurationError(
            "pgtasks metrics need prometheus-client: pip install 'pgtasks[metrics]'"
        ) from None


def outcome_series(outcome: str, job: ClaimedJob) -> str | None:
    """Which counter an attempt's outcome adds to: succeeded, retried, failed or cancelled.

    A timeout schedules another attempt unless it was the last one (as in ``_retry``).
    ``pgtasks.testing`` counts outcomes the same way (without prometheus_client).
    """
    if outcome == "done":
        return "succeeded"
    if outcome == "retry":
        return "retried"
    if outcome == "timeout":
        return "retried" if job.attempt < job.max_attempts else "failed"
    if outcome in ("failed", "discarded"):
        return "failed"
    if outcome == "cancelled":
        return "cancelled"
    return None


def start_latency(job: ClaimedJob) -> float:
    """Seconds between the moment a job was due and its claim (database clock)."""
    due = max(job.run_at, job.created_at)
    return max(0.0, (job.claimed_at - due).total_seconds())


#: Buckets of pgtasks_batch_size (jobs per batch).
BATCH_SIZE_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)

#: The Prometheus counters of the worker's own counts (pgtasks._counters' names).
EXERCISED_SERIES = {
    LEASE_LOST: (
        "pgtasks_leases_lost",
        "Attempts of this worker whose lease was lost before their outcome was written.",
    ),
    FENCED_WRITES_REFUSED: (
        "pgtasks_fenced_writes_refused",
        "Writes of this worker the lease fence refused (outcomes, meta updates, releases).",
    ),
    RESCUED: (
        "pgtasks_jobs_rescued",
        "Jobs this worker's rescuer returned from dead workers.",
    ),
    RELEASED_AT_SHUTDOWN: (
        "pgtasks_jobs_released",
        "Jobs this worker released to pending at shutdown (attempt not used up).",
    ),
    UNKNOWN_TASK_JOBS: (
        "pgtasks_unknown_task_jobs",
        "Jobs of tasks this worker's process could not run, released to pending.",
    ),
    EXPIRED: (
        "pgtasks_jobs_expired",
        "Pending jobs this worker's expiry pass ended cancelled: their start deadline"
        " (expires=) passed before they started.",
    ),
}


class ProcessCountersCollector:
    """Serves the counts of the worker's App: enqueues of this process answered by an
    existing job (its tasks' own enqueues)."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        from prometheus_client.core import CounterMetricFamily

        worker = self.metrics._worker
        value = worker.app.counters.total(ENQUEUES_DEDUPLICATED) if worker is not None else 0
        yield CounterMetricFamily(
            "pgtasks_enqueues_deduplicated",
            "Enqueues of this process answered by an existing job (idempotency key or"
            " uniqueness scope).",
            value=value,
        )


class WorkerMetrics(WorkerEvents):
    """Prometheus metrics of one worker, in a registry of their own (``self.registry``)."""

    def __init__(
        self,
        *,
        queue_depth_interval: float = DEFAULT_QUEUE_DEPTH_INTERVAL,
        process_metrics: bool = True,
    ) -> None:
        _require_prometheus()
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
        from prometheus_client.process_collector import ProcessCollector

        self.queue_depth_interval = positive_seconds("queue_depth_interval=", queue_depth_interval)
        self.registry = CollectorRegistry()
        registry = self.registry
        if process_metrics:
            ProcessCollector(registry=registry)
        self.jobs_started = Counter(
            "pgtasks_jobs_started", "Job attempts started.", JOB_LABELS, registry=registry
        )
        self.jobs_succeeded = Counter(
            "pgtasks_jobs_succeeded", "Job attempts that ended done.", JOB_LABELS, registry=registry
        )
        self.jobs_retried = Counter(
            "pgtasks_jobs_retried",
            "Job attempts that failed and scheduled another attempt.",
            JOB_LABELS,
            registry=registry,
        )
        self.jobs_failed = Counter(
            "pgtasks_jobs_failed",
            "Job attempts that left the job failed (out of attempts, discarded, or not retryable).",
            JOB_LABELS,
            registry=registry,
        )
        self.jobs_cancelled = Counter(
            "pgtasks_jobs_cancelled",
            "Job attempts that ended cancelled.",
            JOB_LABELS,
            registry=registry,
        )
        self.job_duration = Histogram(
            "pgtasks_job_duration_seconds",
            "Run time of job attempts whose outcome was recorded.",
            JOB_LABELS,
            registry=registry,
            buckets=DURATION_BUCKETS,
        )
        self.batch_size = Histogram(
            "pgtasks_batch_size",
            "Jobs per batch of batch tasks this worker ran (docs/howto/flow-control.md).",
            ["task"],
            registry=registry,
            buckets=BATCH_SIZE_BUCKETS,
        )
        self.job_start_latency = Histogram(
            "pgtasks_job_start_latency_seconds",
            "Time from a job being due (max of run_at and created_at) to its claim,"
            " database clock.",
            JOB_LABELS,
            registry=registry,
            buckets=LATENCY_BUCKETS,
        )
        self.busy_slots = Gauge(
            "pgtasks_worker_busy_slots", "Jobs running in this worker.", registry=registry
        )
        self.busy_slots.set_function(self._busy_slots)
        self.slots = Gauge(
            "pgtasks_worker_slots", "Jobs this worker runs at once at most.", registry=registry
        )
        self.slots.set_function(self._slots)
        self.worker_info = Info(
            "pgtasks_worker", "The worker this registry describes.", registry=registry
        )
        self.queue_depths = QueueDepthCollector()
        registry.register(self.queue_depths)
        self.exercised = {
            name: Counter(series, text, registry=registry)
            for name, (series, text) in EXERCISED_SERIES.items()
        }
        registry.register(ProcessCountersCollector(self))
        self.schema_counters = SchemaCountersCollector()
        registry.register(self.schema_counters)
        self._outcome_counters = {
            "succeeded": self.jobs_succeeded,
            "retried": self.jobs_retried,
            "failed": self.jobs_failed,
            "cancelled": self.jobs_cancelled,
        }
        self._worker: Worker | None = None
        self._samplers: list[QueueDepthSampler] = []
        self._server: WSGIServer | None = None
        self._server_thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"<WorkerMetrics worker={self._worker!r} address={self.address}>"

    # -- HTTP --
    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` on ``host:port`` in a daemon thread; returns the bound port.

        ``port=0`` picks a free port. Raises ConfigurationError when the address is taken.
        """
        from prometheus_client import start_http_server

        if self._server is not None:
            raise RuntimeError(f"metrics are already served on {self.address}")
        try:
            server, thread = start_http_server(port, host, registry=self.registry)
        except OSError as error:
            raise ConfigurationError(
                f"cannot serve metrics on {host}:{port}: {error.strerror or error}"
            ) from None
        self._server, self._server_thread = server, thread
        logger.info("serving Prometheus metrics on http://%s/metrics", self.address)
        return int(server.server_port)

    @property
    def address(self) -> str | None:
        """``host:port`` the metrics are served on, or None."""
        if self._server is None:
            return None
        address = self._server.server_address
        host = address[0].decode() if isinstance(address[0], bytes) else str(address[0])
        port = self._server.server_port
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def close(self) -> None:
        """Stop the HTTP server and the queue-depth sampler."""
        self._stop_sampler()
        server, self._server = self._server, None
        thread, self._server_thread = self._server_thread, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(5.0)

    # -- scrape-time gauges --
    def _busy_slots(self) -> float:
        worker = self._worker
        return float(worker.running_jobs) if worker is not None else 0.0

    def _slots(self) -> float:
        worker = self._worker
        return float(worker.concurrency) if worker is not None else 0.0

    def _stop_sampler(self) -> None:
        samplers, self._samplers = self._samplers, []
        for sampler in samplers:
            sampler.stopping.set()
        for sampler in samplers:
            sampler.stop()

    # -- worker events --
    def worker_started(self, worker: Worker) -> None:
        from .. import __version__

        self._worker = worker
        self.worker_info.info(
            {
                "name": worker.name,
                "schema": worker.app.schema,
                "store": worker.app.store_name,
                "queues": ",".join(worker.queues) if worker.queues else "*",
                "version": __version__,
            }
        )
        self._stop_sampler()
        self._samplers = samplers_of(
            worker.app,
            worker.queues,
            self.queue_depths,
            self.schema_counters,
            interval=self.queue_depth_interval,
            name=worker.name,
        )
        for sampler in self._samplers:
            sampler.start()

    def worker_stopped(self, worker: Worker) -> None:
        self._stop_sampler()

    def job_started(self, job: ClaimedJob) -> None:
        self.jobs_started.labels(job.task_name, job.queue).inc()
        self.job_start_latency.labels(job.task_name, job.queue).observe(start_latency(job))

    def counted(self, name: str, amount: int) -> None:
        counter = self.exercised.get(name)
        if counter is not None:
            counter.inc(amount)

    def batch_finished(self, task_name: str, size: int, duration: float) -> None:
        self.batch_size.labels(task_name).observe(size)

    def job_finished(self, job: ClaimedJob, outcome: str, duration: float) -> None:
        self.job_duration.labels(job.task_name, job.queue).observe(max(0.0, duration))
        series = outcome_series(outcome, job)
        if series is not None:
            self._outcome_counters[series].labels(job.task_name, job.queue).inc()
