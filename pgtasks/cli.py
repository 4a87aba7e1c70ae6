"""The ``pgtasks`` command line: a thin shell over the public classes."""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

import click

from ._app import App
from ._cli_executors import executor_options, worker_executor_options
from ._errors import PgTasksError

if TYPE_CHECKING:
    from ._metrics import WorkerMetrics

APP_HELP = "The app as module:attribute (or PGTASKS_APP), e.g. myproj.tasks:app."


def load_app(path: str) -> App:
    """Import ``module:attribute`` (the current directory is importable, as with Celery)."""
    module_name, _, attribute = path.partition(":")
    if not module_name:
        raise click.UsageError(f"invalid app {path!r}: expected module:attribute")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise click.UsageError(f"cannot import {module_name!r} for app {path!r}: {error}") from None
    candidates = [attribute] if attribute else ["app", "application"]
    for name in candidates:
        app = getattr(module, name, None)
        if isinstance(app, App):
            return app
    raise click.UsageError(f"{path!r} does not name a pgtasks App (looked for {candidates})")


def configure_logging(level: str, log_format: str = "text") -> None:
    from ._logging import configure_logging as configure

    configure(level, log_format, sys.stderr)


app_option = click.option(
    "-A", "--app", "app_path", envvar="PGTASKS_APP", required=True, help=APP_HELP
)
log_level_option = click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
log_format_option = click.option(
    "--log-format",
    default="text",
    show_default=True,
    type=click.Choice(["text", "json"]),
    help="json: one JSON object per line (time, level, logger, message, job_id, task, …).",
)


@click.group()
@click.version_option(package_name="pgtasks")
def main() -> None:
    """pgtasks: background tasks on PostgreSQL."""


@main.command()
@app_option
@log_level_option
@log_format_option
def migrate(app_path: str, log_level: str, log_format: str) -> None:
    """Create or upgrade the pgtasks schema (safe to run concurrently and repeatedly)."""
    configure_logging(log_level, log_format)
    app = load_app(app_path)
    with app:
        applied = _guard(app.migrate)
    if applied:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in applied)
        click.echo(f"schema {app.schema!r} migrated: applied {names}")
    else:
        click.echo(f"schema {app.schema!r} is up to date")


@main.command()
@app_option
@click.option("-Q", "--queues", default=None, help="Comma-separated queues (default: all).")
@click.option("-c", "--concurrency", default=10, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--shutdown-timeout",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds running jobs get to finish after SIGTERM/SIGINT before they are released.",
)
@click.option(
    "--lease-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds without heartbeat before a worker's jobs are rescued [app: 30].",
)
@click.option(
    "--heartbeat-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds between heartbeats [app: 5].",
)
@click.option(
    "--rescue-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds between rescue passes [app: 5].",
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds between claims when no notification arrives [app: 1].",
)
@click.option(
    "--ignore-unknown",
    is_flag=True,
    help="Leave jobs of tasks this worker does not know pending instead of failing them.",
)
@click.option(
    "--beat", "with_beat", is_flag=True, help="Also run the periodic scheduler in this process."
)
@click.option(
    "--prefetch",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Jobs claimed beyond the free slots, to start as slots free up (short jobs only).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    help="Serve Prometheus metrics on this port (needs pgtasks[metrics]).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics server binds (0.0.0.0: every interface).",
)
@click.option(
    "--metrics-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=15.0,
    show_default=True,
    help="Seconds between queue-depth samples for the metrics.",
)
@executor_options
@log_level_option
@log_format_option
def worker(
    app_path: str,
    queues: str | None,
    concurrency: int,
    shutdown_timeout: float,
    lease_timeout: float | None,
    heartbeat_interval: float | None,
    rescue_interval: float | None,
    poll_interval: float | None,
    ignore_unknown: bool,
    with_beat: bool,
    prefetch: int,
    metrics_port: int | None,
    metrics_host: str,
    metrics_interval: float,
    log_level: str,
    log_format: str,
    **executor_flags: Any,
) -> None:
    """Claim and run jobs until SIGTERM/SIGINT (a second signal releases running jobs now)."""
    from ._beat import Beat
    from ._worker import Worker

    configure_logging(log_level, log_format)
    app = load_app(app_path)
    metrics = None
    try:
        if metrics_port is not None:
            metrics = _worker_metrics(metrics_port, metrics_host, metrics_interval)
        job_worker = Worker(
            app,
            queues=queues.split(",") if queues else None,
            concurrency=concurrency,
            shutdown_timeout=shutdown_timeout,
            lease_timeout=lease_timeout,
            heartbeat_interval=heartbeat_interval,
            rescue_interval=rescue_interval,
            poll_interval=poll_interval,
            ignore_unknown=ignore_unknown,
            prefetch=prefetch,
            observers=[metrics] if metrics is not None else (),
            **worker_executor_options(app_path, app, executor_flags),
        )
        scheduler = Beat(app) if with_beat else None
        if scheduler is not None:
            # The worker's signal handlers stay in charge; beat stops after the worker.
            threading.Thread(target=scheduler.run, name="pgtasks-beat", daemon=True).start()
        try:
            job_worker.run(install_signal_handlers=True)
        finally:
            if scheduler is not None:
                scheduler.stop(timeout=5)
            if metrics is not None:
                metrics.close()
    except PgTasksError as error:
        click.echo(f"error: {error}", err=True)
        _exit(1)
    app.close()
    # Threads of tasks that outlived the shutdown deadline must not keep the process alive:
    # their jobs were released and will run elsewhere.
    _exit(0)


def _worker_metrics(port: int, host: str, interval: float) -> WorkerMetrics:
    """A WorkerMetrics served on ``host:port``; ConfigurationError without the extra."""
    from ._metrics import WorkerMetrics

    metrics = WorkerMetrics(queue_depth_interval=interval)
    metrics.serve(port, host)
    return metrics


def _exit(code: int) -> None:
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@main.command()
@app_option
@click.option(
    "--grace",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds a tick may be late and still be enqueued whatever its catch-up policy.",
)
@log_level_option
@log_format_option
def beat(app_path: str, grace: float, log_level: str, log_format: str) -> None:
    """Enqueue periodic jobs until SIGTERM/SIGINT (run several: one is active at a time)."""
    from ._beat import Beat

    configure_logging(log_level, log_format)
    app = load_app(app_path)
    if not app.schedules:
        logging.getLogger("pgtasks.beat").warning("app %s declares no schedules", app_path)
    scheduler = Beat(app, grace=grace)
    with app:
        _guard(lambda: scheduler.run(install_signal_handlers=True))


@main.command()
@app_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def schedules(app_path: str, as_json: bool) -> None:
    """List schedules: next run (in their zone and UTC) and last enqueued tick."""
    from ._beat import format_schedules, schedule_statuses, schedules_as_json

    app = load_app(app_path)
    with app:
        now, statuses = _guard(lambda: schedule_statuses(app))
    click.echo(schedules_as_json(now, statuses) if as_json else format_schedules(now, statuses))


@main.group()
def embedded() -> None:
    """The embedded development PostgreSQL (./.pgtasks)."""


@embedded.command("dsn")
@app_option
def embedded_dsn_command(app_path: str) -> None:
    """Start the embedded server if needed and print its DSN."""
    app = load_app(app_path)
    click.echo(_guard(lambda: app.dsn))


@embedded.command("stop")
@app_option
def embedded_stop(app_path: str) -> None:
    """Stop the embedded server of the app's data directory."""
    from ._embedded import stop_embedded

    app = load_app(app_path)
    stopped = _guard(lambda: stop_embedded(app.embedded_dir))
    click.echo("stopped" if stopped else "not running")


def _guard(function: Any) -> Any:
    """Run ``function``; a pgtasks error becomes a one-line message and exit code 1."""
    try:
        return function()
    except PgTasksError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)


from . import _cli_doctor, _cli_operations  # noqa: E402,F401  (register their commands)
