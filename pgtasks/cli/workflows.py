"""``pgtasks workflows list|show|cancel|heal``: workflows (chain, group, chord).

``list`` prints workflows newest first with their shape, steps done, state and times;
``show`` prints a workflow's jobs as a tree of steps with their states (and its
incidents); ``cancel`` cancels what has not run (running jobs are asked to stop);
``heal`` runs a healing pass over stuck steps now (workers run one every heal_interval).
An unknown workflow id is a one-line ``error:`` and exit code 1. In an app of several
stores ``list`` and ``heal`` ask every store (or ``--store``), labelled by store; a
workflow id names its store, so ``show`` and ``cancel`` find it from the id alone.
"""

from __future__ import annotations

from typing import Any

import click
import psycopg

from .._app.app import App
from .._app.workflow_admin import describe_workflow, list_workflows, workflow_incidents
from .._operations import to_json
from .._worker.healer import heal
from .._workflows_text import (
    WORKFLOW_STATES,
    WorkflowSummary,
    format_heal,
    format_incidents,
    format_workflow,
    format_workflows,
)
from ._common import app_option, guard, json_option, load_app
from ._stores import each_store, echo_each, store_option

WORKFLOW_ID = click.IntRange(min=1, max=2**63 - 1)


@click.group()
def workflows() -> None:
    """List, show, cancel and heal workflows (chains, groups and chords of jobs)."""


#: Jobs ``workflows list`` counts at most in each workflow (the dashboard's cap): a list
#: of giant groups reads what a list of small ones does.
LIST_STEPS_CAP = 10_000


@workflows.command("list")
@app_option
@click.option(
    "--status",
    type=click.Choice(WORKFLOW_STATES),
    default=None,
    help="Only workflows in this state.",
)
@click.option(
    "--before",
    type=WORKFLOW_ID,
    default=None,
    metavar="ID",
    help="Only workflows with a smaller id (the next page; of the store that issued ID"
    " unless --store names one).",
)
@click.option(
    "--limit",
    default=50,
    show_default=True,
    type=click.IntRange(min=1, max=10_000),
    metavar="N",
    help="Most workflows listed.",
)
@click.option(
    "--steps-cap",
    default=LIST_STEPS_CAP,
    show_default=True,
    type=click.IntRange(min=0),
    metavar="N",
    help="Jobs counted at most in each workflow: a larger one shows as 'more than N' (0:"
    " count all; a group of a million members is read whole).",
)
@store_option
@json_option
def list_command(
    app_path: str,
    status: str | None,
    before: int | None,
    limit: int,
    steps_cap: int,
    store: str | None,
    as_json: bool,
) -> None:
    """Workflows, newest first: id, shape, steps done of all, state, started, finished."""
    app = load_app(app_path)
    with app:
        if before is not None and store is None and not app.store_router.single:
            store = guard(lambda: app.routing.for_id(before)).store_name  # that store's next page

        def read(owner: App) -> list[WorkflowSummary]:
            return list_workflows(
                owner, status=status, before=before, limit=limit, steps_cap=steps_cap or None
            )

        results = each_store(app, read, store)
    echo_each(
        app,
        results,
        as_json=as_json,
        document=lambda found: [workflow.as_json() for workflow in found],
        text=format_workflows,
    )


#: Jobs ``workflows show`` prints by default: a group of a million members is not read
#: whole (the rest are counted by status).
SHOW_JOBS = 1000


@workflows.command("show")
@app_option
@click.argument("workflow_id", type=WORKFLOW_ID)
@click.option(
    "--limit",
    type=click.IntRange(min=0, max=10_000_000),
    default=SHOW_JOBS,
    show_default=True,
    metavar="N",
    help="Jobs shown at most, the first by id (the others counted by status; 0: all).",
)
@json_option
def show(app_path: str, workflow_id: int, limit: int, as_json: bool) -> None:
    """A workflow's status and its jobs, step by step, with their states."""
    app = load_app(app_path)
    with app:
        workflow = guard(lambda: describe_workflow(app, workflow_id, limit=limit or None))
        incidents = guard(lambda: workflow_incidents(app, workflow_id=workflow_id))
    if as_json:
        click.echo(to_json({**workflow, "incidents": [item.as_json() for item in incidents]}))
        return
    click.echo(format_workflow(workflow))
    if incidents:
        click.echo("incidents:")
        click.echo(format_incidents(incidents))


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


@workflows.command("heal")
@app_option
@store_option
@json_option
def heal_command(app_path: str, store: str | None, as_json: bool) -> None:
    """Move stuck steps on now: waiting steps none of whose predecessors is unfinished are
    started with their input, or cancelled when one failed, was cancelled or is gone.
    Workers run this pass every heal_interval seconds (one worker at a time per store)."""
    app = load_app(app_path)
    with app:

        def run(owner: App) -> Any:
            def on(conn: psycopg.Connection[Any]) -> Any:
                return heal(owner.queries, conn)

            return owner.database.run(on)

        results = each_store(app, run, store)
    echo_each(app, results, as_json=as_json, document=lambda r: r.as_json(), text=format_heal)
