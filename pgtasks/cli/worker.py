"""``pgtasks worker``."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import click

from .._errors import PgTasksError
from ._common import (
    app_option,
    configure_logging,
    exit_now,
    load_app,
    log_format_option,
    log_level_option,
    seconds_option,
)
from .celery_ops import worker_defaults
from .executors import executor_options, worker_executor_options

if TYPE_CHECKING:
    from .._worker.metrics import WorkerMetrics


@click.command()
@app_option
@click.option(
    "-Q",
    "--queues",
    default=None,
    metavar="QUEUES",
    help="Comma-separated queues to claim from [default: all of its store].",
)
@click.option(
    "--store",
    default=None,
    metavar="NAME",
    help="The store to serve, of an app of several (default: the one its queues route to).",
)
@click.option(
    "-c",
    "--concurrency",
    default=10,
    show_default=True,
    type=click.IntRange(min=1),
    metavar="N",
    help="Jobs run at once.",
)
@click.option(
    "--min-concurrency",
    default=None,
    type=click.IntRange(min=1),
    metavar="N",
    help="The fewest jobs at once `pgtasks control pool_shrink` may leave [default: 1].",
)
@click.option(
    "--max-concurrency",
    default=None,
    type=click.IntRange(min=1),
    metavar="N",
    help="The most jobs at once `pgtasks control pool_grow` may allow [default: --concurrency].",
)
@seconds_option(
    "--shutdown-timeout",
    default=30.0,
    help="Seconds running jobs get to finish after SIGTERM/SIGINT before they are released.",
)
@seconds_option(
    "--lease-timeout",
    positive=True,
    help="Seconds without heartbeat before a worker's jobs are rescued [app: 30].",
)
@seconds_option(
    "--heartbeat-interval",
    positive=True,
    help="Seconds between heartbeats [app: 5].",
)
@seconds_option(
    "--rescue-interval",
    positive=True,
    help="Seconds between rescue passes [app: 5].",
)
@seconds_option(
    "--poll-interval",
    positive=True,
    help="Seconds between claims when no notification arrives [app: 1].",
)
@click.option(
    "--ignore-unknown",
    is_flag=True,
    help="Kept for compatibility: a worker always leaves jobs of tasks it does not know"
    " pending, for a worker that knows them.",
)
@click.option(
    "-B",
    "--beat",
    "with_beat",
    is_flag=True,
    help="Also run the periodic scheduler in this process.",
)
@click.option(
    "--prefetch",
    default=None,
    type=click.IntRange(min=0),
    metavar="N",
    help="Jobs claimed beyond the free slots, to start as slots free up [default: 2 per slot"
    " while the jobs run 10 ms or less on average, else 0].",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    metavar="PORT",
    help="Serve Prometheus metrics on this port (needs pgtasks[metrics]).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    metavar="ADDRESS",
    help="Address the metrics server binds (0.0.0.0: every interface).",
)
@seconds_option(
    "--metrics-interval",
    default=15.0,
    positive=True,
    help="Seconds between queue-depth samples for the metrics.",
)
@executor_options
@log_level_option
@log_format_option
def worker(
    app_path: str,
    queues: str | None,
    store: str | None,
    concurrency: int,
    min_concurrency: int | None,
    max_concurrency: int | None,
    shutdown_timeout: float,
    lease_timeout: float | None,
    heartbeat_interval: float | None,
    rescue_interval: float | None,
    poll_interval: float | None,
    ignore_unknown: bool,
    with_beat: bool,
    prefetch: int | None,
    metrics_port: int | None,
    metrics_host: str,
    metrics_interval: float,
    log_level: str,
    log_format: str,
    **executor_flags: Any,
) -> None:
    """Claim and run jobs until SIGTERM/SIGINT (a second signal releases running jobs now)."""
    from .._worker.beat import Beat
    from .._worker.settings import WorkerSettings
    from .._worker.signals import StopSignals, worker_name
    from .._worker.worker import Worker

    configure_logging(log_level, log_format)
    # Before the app is imported: a stop signal from now on is remembered and applied to
    # the worker once it exists, and the handlers stay until the process ends (a second
    # signal is never met by the default action, however late it comes).
    signals = StopSignals(worker_name(), shutdown_timeout=shutdown_timeout)
    signals.install()
    app = load_app(app_path)
    # A Celery app's worker_* settings, for the options not given here.
    defaults = worker_defaults(click.get_current_context(), app_path)
    concurrency = defaults.pop("concurrency", concurrency)
    prefetch = defaults.pop("prefetch", prefetch)
    executor_flags.update(defaults)
    metrics = None
    try:
        # The options as one checked value (an inconsistent pair fails here, before
        # the metrics port opens).
        settings = WorkerSettings.derive(
            app.settings,
            queues.split(",") if queues else None,
            concurrency=concurrency,
            shutdown_timeout=shutdown_timeout,
            lease_timeout=lease_timeout,
            heartbeat_interval=heartbeat_interval,
            rescue_interval=rescue_interval,
            poll_interval=poll_interval,
            ignore_unknown=ignore_unknown,
            prefetch=prefetch,
            store=store,
            min_concurrency=min_concurrency,
            max_concurrency=max_concurrency,
            **worker_executor_options(app_path, app, executor_flags),
        )
        app.store_router.check()  # two stores of one number or uid: refused, naming both
        if metrics_port is not None:
            metrics = _worker_metrics(metrics_port, metrics_host, metrics_interval)
        job_worker = Worker.from_settings(
            app, settings, observers=[metrics] if metrics is not None else ()
        )
        signals.attach(job_worker)
        scheduler = Beat(job_worker.app) if with_beat else None
        if scheduler is not None:
            # The worker's signal handlers stay in charge; beat stops after the worker.
            threading.Thread(target=scheduler.run, name="pgtasks-beat", daemon=True).start()
        try:
            job_worker.run()
        finally:
            if scheduler is not None:
                scheduler.stop(timeout=5)
            if metrics is not None:
                metrics.close()
    except PgTasksError as error:
        click.echo(f"error: {error}", err=True)
        exit_now(1)
    app.close()
    # Threads of tasks that outlived the shutdown deadline must not keep the process alive:
    # their jobs were released and will run elsewhere.
    exit_now(0)


def _worker_metrics(port: int, host: str, interval: float) -> WorkerMetrics:
    """A WorkerMetrics served on ``host:port``; ConfigurationError without the extra."""
    from .._worker.metrics import WorkerMetrics

    metrics = WorkerMetrics(queue_depth_interval=interval)
    metrics.serve(port, host)
    return metrics
