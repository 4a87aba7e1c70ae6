"""``pgtasks embedded dsn|stop``: the embedded development PostgreSQL."""

from __future__ import annotations

import click

from ._common import app_option, guard, load_app


@click.group()
def embedded() -> None:
    """The embedded development PostgreSQL (./.pgtasks)."""


@embedded.command("dsn")
@app_option
def embedded_dsn_command(app_path: str) -> None:
    """Start the embedded server if needed and print its DSN."""
    app = load_app(app_path)
    click.echo(guard(lambda: app.dsn))


@embedded.command("stop")
@app_option
def embedded_stop(app_path: str) -> None:
    """Stop the embedded server of the app's data directory."""
    from .._embedded import stop_embedded

    app = load_app(app_path)
    stopped = guard(lambda: stop_embedded(app.embedded_dir))
    click.echo("stopped" if stopped else "not running")
