"""``pgtasks workflows show|cancel``: workflows (chain, group, chord; migration 0011).

``show`` prints a workflow's jobs as a tree of steps with their states; ``cancel``
cancels what has not run (running jobs are asked to stop). An unknown workflow id is a
one-line ``error:`` and exit code 1.
"""

from __future__ import annotations

from typing import Any

import click

from .._operations import to_json
from .._workflows_text import format_workflow
from ._common import app_option, guard, load_app

WORKFLOW_ID = click.IntRange(min=1, max=2**63 - 1)

json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document instead of text."
)


@click.group()
def workflows() -> None:
    """Show and cancel workflows (chains, groups and chords of jobs)."""


@workflows.command("show")
@app_option
@click.argument("workflow_id", type=WORKFLOW_ID)
@json_option
def show(app_path: str, workflow_id: int, as_json: bool) -> None:
    """A workflow's status and its jobs, step by step, with their states."""
    app = load_app(app_path)
    with app:
        workflow = guard(lambda: app.get_workflow(workflow_id))
    click.echo(to_json(workflow) if as_json else format_workflow(workflow))


@workflows.command("cancel")
@app_option
@click.argument("workflow_id", type=WORKFLOW_ID)
@json_option
def cancel(app_path: str, workflow_id: int, as_json: bool) -> None:
    """Cancel what has not run of a workflow; running jobs are asked to stop."""
    app = load_app(app_path)
    with app:
        count = guard(lambda: app.cancel_workflow(workflow_id))
    document: dict[str, Any] = {"workflow_id": workflow_id, "cancelled": count}
    if as_json:
        click.echo(to_json(document))
    else:
        click.echo(f"workflow {workflow_id}: {count} job(s) cancelled or asked to stop")
