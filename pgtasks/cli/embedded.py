"""``pgtasks embedded start|status|stop|dsn``: the embedded development PostgreSQL.

``start``, ``status`` and ``stop`` need no app: they act on ``--data-dir``, else the
``embedded_dir`` of the app ``-A`` names (when given), else PGTASKS_EMBEDDED_DIR, else
``./.pgtasks`` (where ``App()`` keeps it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from ._common import app_option, guard, json_option, load_app, optional_app_option

#: ``pgtasks embedded status`` exits with this when the server is not running (as the
#: ``status`` action of an LSB init script does).
NOT_RUNNING = 3

data_dir_option = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    metavar="DIR",
    help="The embedded server's data directory [default: the app's embedded_dir, else"
    " PGTASKS_EMBEDDED_DIR, else ./.pgtasks].",
)


@click.group()
def embedded() -> None:
    """The embedded development PostgreSQL (./.pgtasks): start, status, stop, dsn."""


def _data_dir(app_path: str | None, data_dir: Path | None) -> Path:
    from .._store.connecting import embedded_data_dir

    if data_dir is not None:
        return data_dir.resolve()
    if app_path is not None:
        return load_app(app_path).embedded_dir
    return embedded_data_dir(None)


def _note_configured_dsn() -> None:
    for variable in ("PGTASKS_DSN", "DATABASE_URL"):
        if os.environ.get(variable):
            click.echo(
                f"note: {variable} is set, so apps connect to that server, not to this one",
                err=True,
            )
            return


@embedded.command("start")
@optional_app_option
@data_dir_option
def embedded_start(app_path: str | None, data_dir: Path | None) -> None:
    """Start the embedded server (initialising its data directory on first use) unless it
    is running, and print its DSN. It keeps running until pgtasks embedded stop."""
    from .._embedded import start_embedded

    directory = _data_dir(app_path, data_dir)
    dsn: str = guard(lambda: start_embedded(directory))
    click.echo(f"embedded PostgreSQL running in {directory}", err=True)
    _note_configured_dsn()
    click.echo(dsn)


@embedded.command("status")
@optional_app_option
@data_dir_option
@json_option
def embedded_status_command(app_path: str | None, data_dir: Path | None, as_json: bool) -> None:
    """Whether the embedded server runs: its pid, version and DSN. Exit 0 running, 3 not."""
    from .._embedded import embedded_status
    from .._operations import to_json

    status = embedded_status(_data_dir(app_path, data_dir))
    if as_json:
        click.echo(to_json(status.as_json()))
    elif status.running:
        click.echo(
            f"embedded PostgreSQL {status.version}: running (pid {status.pid})\n"
            f"  data directory: {status.data_dir}\n"
            f"  dsn:            {status.dsn}"
        )
    else:
        state = "initialised" if status.initialized else "not initialised"
        click.echo(
            f"embedded PostgreSQL: not running\n  data directory: {status.data_dir} ({state})"
        )
    sys.exit(0 if status.running else NOT_RUNNING)


@embedded.command("stop")
@optional_app_option
@data_dir_option
def embedded_stop(app_path: str | None, data_dir: Path | None) -> None:
    """Stop the embedded server (fast shutdown: open connections are closed)."""
    from .._embedded import stop_embedded

    directory = _data_dir(app_path, data_dir)
    stopped = guard(lambda: stop_embedded(directory))
    click.echo("stopped" if stopped else "not running")


@embedded.command("dsn")
@app_option
def embedded_dsn_command(app_path: str) -> None:
    """Start the embedded server if needed and print its DSN.

    With a DSN configured (PGTASKS_DSN, DATABASE_URL, App(dsn=...)) no embedded server
    is used: that DSN is printed with its password hidden.
    """
    from .._dsn import dsn_secrets, redact
    from .._embedded import start_embedded

    app = load_app(app_path)
    if app.uses_embedded:
        # Started here without the "no database configured" warning: printing the
        # embedded server's DSN is what was asked for.
        print_dsn: str = guard(lambda: start_embedded(app.database.embedded_dir))
        click.echo(print_dsn)
        return
    dsn: str = guard(lambda: app.dsn)
    if not app.uses_embedded:
        dsn = redact(dsn, dsn_secrets(dsn))
        click.echo("(a DSN is configured; no embedded server is used)", err=True)
    click.echo(dsn)
