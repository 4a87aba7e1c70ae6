"""``pgtasks worker``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .._errors import PgTasksError
from .._worker.settings import option_default
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

F = TypeVar("F", bound=Callable[..., Any])

#: The options of ``pgtasks worker`` in --help's order. One named for a key of
#: WorkerOptions (pgtasks/_worker/settings.py) passes to WorkerSettings.derive under that
#: name, its default the settings' own; None marks the command's own options (the
#: executor flags, cli/executors.py, are turned into WorkerOptions there).
OPTIONS: list[tuple[str | None, Callable[[F], F]]] = [
    (None, app_option),
    (
        None,
        click.option(
            "-Q",
            "--queues",
            default=None,
            metavar="QUEUES",
            help="Comma-separated queues to claim from [default: all of its store].",
        ),
    ),
    (
        "store",
        click.option(
            "--store",
            default=None,
            metavar="NAME",
            help="The store to serve, of an app of several (default: the one its queues route to).",
        ),
    ),
    (
        "concurrency",
        click.option(
            "-c",
            "--concurrency",
            default=option_default("concurrency"),
            show_default=True,
            type=click.IntRange(min=1),
            metavar="N",
            help="Jobs run at once.",
        ),
    ),
    (
        "min_concurrency",
        click.option(
            "--min-concurrency",
            default=None,
            type=click.IntRange(min=1),
            metavar="N",
            help="The fewest jobs at once `pgtasks control pool_shrink` may leave [default: 1].",
        ),
    ),
    (
        "max_concurrency",
        click.option(
            "--max-concurrency",
            default=None,
            type=click.IntRange(min=1),
            metavar="N",
            help="The most jobs at once `pgtasks control pool_grow` may allow [default:"
            " --concurrency].",
        ),
    ),
    (
        "shutdown_timeout",
        seconds_option(
            "--shutdown-timeout",
            default=option_default("shutdown_timeout"),
            help="Seconds running jobs get to finish after SIGTERM/SIGINT before they are"
            " released.",
        ),
    ),
    (
        "lease_timeout",
        seconds_option(
            "--lease-timeout",
            positive=True,
            help="Seconds without heartbeat before a worker's jobs are rescued [app: 30].",
        ),
    ),
    (
        "heartbeat_interval",
        seconds_option(
            "--heartbeat-interval", positive=True, help="Seconds between heartbeats [app: 5]."
        ),
    ),
    (
        "rescue_interval",
        seconds_option(
            "--rescue-interval", positive=True, help="Seconds between rescue passes [app: 5]."
        ),
    ),
    (
        "poll_interval",
        seconds_option(
            "--poll-interval",
            positive=True,
            help="Seconds between claims when no notification arrives [app: 1].",
        ),
    ),
    (
        "ignore_unknown",
        click.option(
            "--ignore-unknown",
            is_flag=True,
            help="Kept for compatibility: a worker always leaves jobs of tasks it does not"
            " know pending, for a worker that knows them.",
        ),
    ),
    (
        None,
        click.option(
            "-B",
            "--beat",
            "with_beat",
            is_flag=True,
            help="Also run the periodic scheduler in this process.",
        ),
    ),
    (
        "prefetch",
        click.option(
            "--prefetch",
            default=None,
            type=click.IntRange(min=0),
            metavar="N",
            help="Jobs claimed beyond the free slots, to start as slots free up [default: 2"
            " per slot while the jobs run 10 ms or less on average, else 0].",
        ),
    ),
    (
        None,
        click.option(
            "--metrics-port",
            type=click.IntRange(min=0, max=65535),
            default=None,
            metavar="PORT",
            help="Serve Prometheus metrics on this port (needs pgtasks[metrics]).",
        ),
    ),
    (
        None,
        click.option(
            "--metrics-host",
            default="127.0.0.1",
            show_default=True,
            metavar="ADDRESS",
            help="Address the metrics server binds (0.0.0.0: every interface).",
        ),
    ),
    (
        None,
        seconds_option(
            "--metrics-interval",
            default=15.0,
            positive=True,
            help="Seconds between queue-depth samples for the metrics.",
        ),
    ),
    (None, executor_options),
    (None, log_level_option),
    (None, log_format_option),
]
#: The options that are WorkerOptions, under their names.
SETTING_OPTIONS = tuple(name for name, _ in OPTIONS if name is not None)


def worker_options(command: F) -> F:
    """Decorate the worker command with OPTIONS, in their order."""
    for _, option in reversed(OPTIONS):
        command = option(command)
    return command


@click.command()
@worker_options
def worker(
    app_path: str,
    queues: str | None,
    with_beat: bool,
    metrics_port: int | None,
    metrics_host: str,
    metrics_interval: float,
    log_level: str,
    log_format: str,
    **flags: Any,
) -> None:
    """Claim and run jobs until SIGTERM/SIGINT (a second signal releases running jobs now)."""
    from .._worker.beat import Beat
    from .._worker.settings import WorkerSettings
    from .._worker.signals import StopSignals, worker_name
    from .._worker.worker import Worker

    configure_logging(log_level, log_format)
    options: dict[str, Any] = {name: flags.pop(name) for name in SETTING_OPTIONS}
    executor_flags = flags  # the rest: cli/executors.py's
    # Before the app is imported: a stop signal from now on is remembered and applied to
    # the worker once it exists, and the handlers stay until the process ends (a second
    # signal is never met by the default action, however late it comes).
    signals = StopSignals(worker_name(), shutdown_timeout=options["shutdown_timeout"])
    signals.install()
    app = load_app(app_path)
    # A Celery app's worker_* settings, for the options not given here.
    defaults = worker_defaults(click.get_current_context(), app_path)
    for name in ("concurrency", "prefetch"):
        options[name] = defaults.pop(name, options[name])
    executor_flags.update(defaults)
    metrics = None
    try:
        # The options as one checked value (an inconsistent pair fails here, before
        # the metrics port opens).
        settings = WorkerSettings.derive(
            app.settings,
            queues.split(",") if queues else None,
            **options,
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
