"""``pgtasks migrate``."""

from __future__ import annotations

import click

from ._common import (
    app_option,
    configure_logging,
    guard,
    load_app,
    log_format_option,
    log_level_option,
)


@click.command()
@app_option
@log_level_option
@log_format_option
def migrate(app_path: str, log_level: str, log_format: str) -> None:
    """Create or upgrade the pgtasks schema (safe to run concurrently and repeatedly)."""
    configure_logging(log_level, log_format)
    app = load_app(app_path)
    with app:
        applied = guard(app.migrate)
    if applied:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in applied)
        click.echo(f"schema {app.schema!r} migrated: applied {names}")
    else:
        click.echo(f"schema {app.schema!r} is up to date")
