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
    """Start the embedded server if needed and print its DSN.

    With a DSN configured (PGTASKS_DSN, DATABASE_URL, App(dsn=...)) no embedded server
    is used: that DSN is printed with its password hidden.
    """
    from .._store.db import dsn_secrets, redact

    app = load_app(app_path)
    dsn: str = guard(lambda: app.dsn)
    if not app.uses_embedded:
        dsn = redact(dsn, dsn_secrets(dsn))
        click.echo("(a DSN is configured; no embedded server is used)", err=True)
    click.echo(dsn)


@embedded.command("stop")
@app_option
def embedded_stop(app_path: str) -> None:
    """Stop the embedded server of the app's data directory."""
    from .._embedded import stop_embedded

    app = load_app(app_path)
    stopped = guard(lambda: stop_embedded(app.embedded_dir))
    click.echo("stopped" if stopped else "not running")
