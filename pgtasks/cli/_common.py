"""Helpers shared by the command modules: loading the app, common options, one-line errors."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import click

from .._app import loading
from .._app.app import App
from .._errors import ConfigurationError, PgTasksError

APP_HELP = "The app as module:attribute (or PGTASKS_APP), e.g. myproj.tasks:app."


def load_app(path: str) -> App:
    """The App ``-A`` names; a usage error (exit 2) when it names none."""
    try:
        return loading.load_app(path)
    except ConfigurationError as error:
        raise click.UsageError(str(error)) from None


def configure_logging(level: str, log_format: str = "text") -> None:
    from .._logging import configure_logging as configure

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


def guard(function: Any) -> Any:
    """Run ``function``; a pgtasks error becomes a one-line message and exit code 1."""
    try:
        return function()
    except PgTasksError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)


def exit_now(code: int) -> None:
    """Flush logs and output, then end the process at once (threads may linger)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
