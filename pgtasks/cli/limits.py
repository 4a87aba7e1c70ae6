"""``pgtasks limits``: the stored concurrency and rate limits (migration 0009) and the jobs
running under each (per key for per-key limits)."""

from __future__ import annotations

import click

from .._app import admin
from .._limits import format_limits
from .._operations import to_json
from ._common import app_option, guard, load_app


@click.command()
@app_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of text.")
def limits(app_path: str, as_json: bool) -> None:
    """Every stored limit: concurrency, rate, tokens left, running and pending jobs; then
    the keys of per-key limits that have jobs running."""
    app = load_app(app_path)
    with app:
        states, usage = guard(lambda: admin.limits(app))
    if as_json:
        click.echo(
            to_json(
                {
                    "limits": [state.as_json() for state in states],
                    "keys": [dict(row) for row in usage if row["key"] is not None],
                }
            )
        )
    else:
        click.echo(format_limits(states, usage))
