"""``pgtasks beat`` and ``pgtasks schedules``."""

from __future__ import annotations

import logging

import click

from ._common import (
    app_option,
    configure_logging,
    guard,
    json_option,
    load_app,
    log_format_option,
    log_level_option,
)


@click.command()
@app_option
@click.option(
    "--grace",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="Seconds a tick may be late and still be enqueued whatever its catch-up policy.",
)
@log_level_option
@log_format_option
def beat(app_path: str, grace: float, log_level: str, log_format: str) -> None:
    """Enqueue periodic jobs until SIGTERM/SIGINT (run several: one is active at a time)."""
    from .._worker.beat import Beat

    configure_logging(log_level, log_format)
    app = load_app(app_path)
    if not app.schedules:
        logging.getLogger("pgtasks.beat").warning("app %s declares no schedules", app_path)
    scheduler = Beat(app, grace=grace)
    with app:
        guard(lambda: scheduler.run(install_signal_handlers=True))


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
