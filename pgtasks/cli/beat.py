"""``pgtasks beat`` and ``pgtasks schedules``."""

from __future__ import annotations

import logging
import threading

import click

from ._common import (
    app_option,
    configure_logging,
    exit_now,
    guard,
    json_option,
    load_app,
    log_format_option,
    log_level_option,
    seconds_option,
)


@click.command()
@app_option
@seconds_option(
    "--grace",
    default=60.0,
    help="Seconds a tick may be late and still be enqueued whatever its catch-up policy.",
)
@click.option(
    "--store",
    "stores",
    multiple=True,
    metavar="NAME",
    help="A store whose schedules to run, of an app of several (repeatable) [default: all].",
)
@log_level_option
@log_format_option
def beat(
    app_path: str, grace: float, stores: tuple[str, ...], log_level: str, log_format: str
) -> None:
    """Enqueue periodic jobs until SIGTERM/SIGINT (run several: one is active at a time).

    An app of several stores: one loop per store, each elected leader in its store (a
    schedule's ticks live in its queue's store)."""
    from .._worker.beat import STOP_TIMEOUT, Beat, BeatStop
    from .._worker.signals import StopSignals, worker_name

    configure_logging(log_level, log_format)
    # Before the app is imported, as the worker's: a stop signal from now on is
    # remembered and applied to the beats once they exist; the handlers only write to a
    # pipe (a handler that logs or sets an Event can deadlock its own thread).
    signals = StopSignals(worker_name(), shutdown_timeout=STOP_TIMEOUT, kind="beat")
    signals.install()
    app = load_app(app_path)
    unknown = [name for name in stores if name not in app.store_router.names]
    if unknown:
        raise click.BadParameter(
            f"no store named {', '.join(map(repr, unknown))}: this app's stores are"
            f" {', '.join(app.store_router.names)}",
            param_hint="--store",
        )
    if not app.schedules:
        logging.getLogger("pgtasks.beat").warning("app %s declares no schedules", app_path)
    names = stores or app.store_router.names
    with app:
        if not app.store_router.single:
            guard(app.store_router.check)
        beats = guard(
            lambda: [
                Beat(app if app.store_router.single else app.for_store(name), grace=grace)
                for name in names
            ]
        )
        signals.attach(BeatStop(beats))
        threads = [
            threading.Thread(target=other.run, name=f"pgtasks-beat-{name}", daemon=True)
            for name, other in zip(names[1:], beats[1:], strict=True)
        ]
        for thread in threads:
            thread.start()
        try:
            guard(beats[0].run)
        finally:
            for other in beats[1:]:
                other.stop(timeout=5)
    # Ended now, handlers in place: an interpreter's shutdown puts the default handlers
    # back, and a late stop signal would then kill the process (status -15, not 0).
    exit_now(0)


@click.command()
@app_option
@json_option
def schedules(app_path: str, as_json: bool) -> None:
    """List schedules: next run (in their zone and UTC) and last enqueued tick."""
    from .._app.schedules import format_schedules, schedule_statuses, schedules_as_json

    app = load_app(app_path)
    with app:
        now, statuses = guard(lambda: schedule_statuses(app))
    click.echo(schedules_as_json(now, statuses) if as_json else format_schedules(now, statuses))
