"""``pgtasks queues list|pause|resume``: paused queues (migration 0007).

A paused queue is not claimed by any worker from at most one poll interval on; jobs
already running finish, enqueuing goes on. ``list`` shows every known queue (declared by
a task of the app, with unfinished jobs, or paused) with its pending, due and running
jobs and whether it is paused.
"""

from __future__ import annotations

from typing import Any

import click

from .._app import admin
from .._operations import to_json
from .._payload import check_name
from .._queues import format_queues
from ._common import app_option, guard, load_app

json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document instead of text."
)


def _queue_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return check_name("queue", value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


queue_argument = click.argument("queue", callback=_queue_name)


@click.group()
def queues() -> None:
    """List, pause and resume queues (shared by every worker of the schema)."""


@queues.command("list")
@app_option
@json_option
def list_queues(app_path: str, as_json: bool) -> None:
    """Every known queue: pending, due and running jobs, and whether it is paused."""
    app = load_app(app_path)
    with app:
        states = guard(lambda: admin.queues(app))
    if as_json:
        click.echo(to_json({"queues": [state.as_json() for state in states]}))
    else:
        click.echo(format_queues(states))


def _report(queue: str, changed: bool, done: str, already: str, as_json: bool) -> None:
    document: dict[str, Any] = {"queue": queue, "changed": changed}
    if as_json:
        click.echo(to_json(document))
    else:
        click.echo(f"queue {queue}: {done if changed else already}")


@queues.command()
@app_option
@json_option
@queue_argument
def pause(app_path: str, as_json: bool, queue: str) -> None:
    """Pause QUEUE: no worker claims its jobs from one poll interval on (running jobs
    finish; enqueuing goes on)."""
    app = load_app(app_path)
    with app:
        changed = guard(lambda: app.pause_queue(queue))
    _report(queue, changed, "paused", "was paused already", as_json)


@queues.command()
@app_option
@json_option
@queue_argument
def resume(app_path: str, as_json: bool, queue: str) -> None:
    """Resume QUEUE: its workers are woken and claim its jobs again."""
    app = load_app(app_path)
    with app:
        changed = guard(lambda: app.resume_queue(queue))
    _report(queue, changed, "resumed", "was not paused", as_json)
