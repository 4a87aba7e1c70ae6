"""``pgtasks limits``: the stored concurrency and rate limits and the jobs
running under each (per key for per-key limits); of every store of an app of several
(each store keeps the limits of the tasks and queues it serves), or of ``--store``."""

from __future__ import annotations

from typing import Any

import click

from .._app.keyed_admin import LimitsView, format_keyed, limits_view, release_sequence
from .._limits import format_limits
from .._operations import to_json
from ._common import app_option, checked_name, guard, json_option, load_app
from ._stores import each_store, echo_each, store_option


@click.command()
@app_option
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of text.")
def limits(app_path: str, store: str | None, as_json: bool) -> None:
    """Every stored limit: concurrency, rate, tokens left, running, pending and held-back
    jobs; then the busiest keys of per-key limits, the busiest and starved fair keys, and
    the sequences (head, length, held by a failed job)."""
    app = load_app(app_path)
    with app:
        results = each_store(app, limits_view, store)

    def document(view: LimitsView) -> dict[str, Any]:
        states = view.limits
        return {
            "limits": [state.as_json() for state in states],
            "keys": [
                {"name": state.name, **key.as_json()} for state in states for key in state.top_keys
            ],
            **view.keyed.as_dict(),
        }

    def text(view: LimitsView) -> str:
        keyed = format_keyed(view.keyed)
        return format_limits(view.limits) + (f"\n\n{keyed}" if keyed else "")

    echo_each(app, results, as_json=as_json, document=document, text=text)


@click.group()
def sequences() -> None:
    """Sequences (jobs of one sequence_key run one at a time, in enqueue order)."""


@sequences.command()
@app_option
@json_option
@click.argument("key", callback=checked_name("sequence key"))
def release(app_path: str, as_json: bool, key: str) -> None:
    """Release sequence KEY from the failed job holding it: its next job starts (the
    failed job stays failed)."""
    app = load_app(app_path)
    with app:
        started = guard(lambda: release_sequence(app, key))
    if as_json:
        click.echo(to_json({"sequence": key, "started": started}))
    elif started is None:
        click.echo(f"sequence {key}: released; no job started (none waits, or one runs)")
    else:
        click.echo(f"sequence {key}: released; job {started} started")
