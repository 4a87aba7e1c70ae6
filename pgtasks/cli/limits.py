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
    """Every stored limit: concurrency, rate, tokens left, running, pending and held-back
    jobs; then the busiest keys of per-key limits."""
    app = load_app(app_path)
    with app:
        states = guard(lambda: admin.limits(app))
    if as_json:
        click.echo(
            to_json(
                {
                    "limits": [state.as_json() for state in states],
                    "keys": [
                        {"name": state.name, **key.as_json()}
                        for state in states
                        for key in state.top_keys
                    ],
                }
            )
        )
    else:
        click.echo(format_limits(states))
