"""The ``pgtasks`` command line: a thin shell over the public classes."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

import click

from ._app import App
from ._errors import PgTasksError

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


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


app_option = click.option(
    "-A", "--app", "app_path", envvar="PGTASKS_APP", required=True, help=APP_HELP
)
log_level_option = click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)


@click.group()
@click.version_option(package_name="pgtasks")
def main() -> None:
    """pgtasks: background tasks on PostgreSQL."""


@main.command()
@app_option
@log_level_option
def migrate(app_path: str, log_level: str) -> None:
    """Create or upgrade the pgtasks schema (safe to run concurrently and repeatedly)."""
    configure_logging(log_level)
    app = load_app(app_path)
    with app:
        applied = _guard(app.migrate)
    if applied:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in applied)
        click.echo(f"schema {app.schema!r} migrated: applied {names}")
    else:
        click.echo(f"schema {app.schema!r} is up to date")


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
