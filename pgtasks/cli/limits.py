"""``pgtasks limits``: the stored concurrency and rate limits and the jobs
running under each (per key for per-key limits); of every store of an app of several
(each store keeps the limits of the tasks and queues it serves), or of ``--store``."""

from __future__ import annotations

from typing import Any

import click

from .._app import admin
from .._app.flow_stats import FlowStats, flow_stats
from .._limits import LimitState, format_limits
from ._common import app_option, load_app
from ._stores import each_store, echo_each, store_option


@click.command()
@app_option
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of text.")
def limits(app_path: str, store: str | None, as_json: bool) -> None:
    """Every stored limit: concurrency, rate, tokens left, running, pending and held-back
    jobs; then the busiest keys of per-key limits."""
    app = load_app(app_path)
    with app:
        results = each_store(app, lambda one: (admin.limits(one), flow_stats(one)), store)

    def document(read: tuple[list[LimitState], FlowStats]) -> dict[str, Any]:
        states, flow = read
        return {
            "limits": [state.as_json() for state in states],
            "keys": [
                {"name": state.name, **key.as_json()} for state in states for key in state.top_keys
            ],
            **flow.as_json(),  # debounce and batches (docs/howto/flow-control.md)
        }

    def text(read: tuple[list[LimitState], FlowStats]) -> str:
        flow = read[1].text()
        return format_limits(read[0]) + (f"\n\n{flow}" if flow else "")

    echo_each(app, results, as_json=as_json, document=document, text=text)
