"""``pgtasks queues list|pause|resume|pause-host|resume-host``: paused queues, and the
workers of one host paused as a whole.

A paused queue is not claimed by any worker from at most one poll interval on; jobs
already running finish, enqueuing goes on. ``list`` shows every known queue (declared by
a task of the app, with unfinished jobs, or paused) with its pending, due and running
jobs and whether it is paused.
"""

from __future__ import annotations

import dataclasses

import click

from .._operations import to_json
from .._queues import format_queues
from ._common import (
    app_option,
    checked_name,
    exit_now,
    guard,
    json_option,
    load_app,
    seconds_option,
)
from ._stores import each_store, echo_each, store_option

queue_argument = click.argument("queue", callback=checked_name("queue"))


@click.group()
def queues() -> None:
    """List, pause and resume queues (shared by every worker of the schema)."""


@queues.command("list")
@app_option
@store_option
@json_option
def list_queues(app_path: str, store: str | None, as_json: bool) -> None:
    """Every known queue: pending, due and running jobs, and whether it is paused."""
    app = load_app(app_path)
    with app:
        results = each_store(app, lambda owner: owner.admin.queues(), store)
    echo_each(
        app,
        results,
        as_json=as_json,
        document=lambda states: {"queues": [state.as_json() for state in states]},
        text=format_queues,
    )


def _switch(app_path: str, queue: str, as_json: bool, *, pause: bool) -> None:
    """Pause or resume ``queue`` and say whether that changed it."""
    app = load_app(app_path)
    with app:
        changed = guard(lambda: app.pause_queue(queue) if pause else app.resume_queue(queue))
        used = guard(lambda: app.admin.queue_in_use(queue)) if pause else True
    if as_json:
        document: dict[str, object] = {"queue": queue, "changed": changed}
        click.echo(to_json(document if used else {**document, "in_use": False}))
    elif pause:
        click.echo(f"queue {queue}: {'paused' if changed else 'was paused already'}")
    else:
        click.echo(f"queue {queue}: {'resumed' if changed else 'was not paused'}")
    if not used:
        click.echo(
            f"hint: no task or schedule of this app, no unfinished job and no live worker"
            f" uses queue {queue!r} (a typo?); it is paused all the same: jobs enqueued to it"
            f" wait until `pgtasks queues resume {queue}`",
            err=True,
        )


@queues.command()
@app_option
@json_option
@queue_argument
def pause(app_path: str, as_json: bool, queue: str) -> None:
    """Pause QUEUE: no worker claims its jobs from one poll interval on (running jobs
    finish; enqueuing goes on)."""
    _switch(app_path, queue, as_json, pause=True)


@queues.command()
@app_option
@json_option
@queue_argument
def resume(app_path: str, as_json: bool, queue: str) -> None:
    """Resume QUEUE: its workers are woken and claim its jobs again."""
    _switch(app_path, queue, as_json, pause=False)


@queues.command()
@app_option
@json_option
@queue_argument
@click.option("--to", "target", required=True, metavar="STORE", help="The store it moves to.")
@click.option(
    "--from",
    "source",
    default=None,
    metavar="STORE",
    help="The store it leaves [default: the one it routes to in this app's configuration].",
)
@seconds_option(
    "--timeout",
    default=600.0,
    help="How long to wait for the source store to drain.",
)
def move(
    app_path: str,
    as_json: bool,
    queue: str,
    target: str,
    source: str | None,
    timeout: float,
) -> None:
    """Move QUEUE to another store: pause it in STORE, wait while you switch its route
    and the old store's workers finish its jobs there, then resume it in STORE.

    Jobs enqueued in STORE once producers use the new route wait until the old store
    holds none, so none overtakes an older job. Exit 1 when the wait timed out (QUEUE
    stays paused in STORE: run the command again to keep waiting)."""
    app = load_app(app_path)
    told: list[int] = []

    def waiting(left: int) -> None:
        if not told and not as_json:
            click.echo(
                f"queue {queue} paused on store {target}. Switch its route now"
                f" (routes={{{queue!r}: {target!r}}} or PGTASKS_ROUTES) and deploy it to"
                f" every producer and worker; waiting for its {left} unfinished job(s) in"
                " the old store to finish (its workers run them)...",
                err=True,
            )
        told.append(left)

    with app:
        result = guard(
            lambda: app.admin.move_queue(
                queue, target, source=source, timeout=timeout, waiting=waiting
            )
        )
    if as_json:
        click.echo(to_json(dataclasses.asdict(result) | {"done": result.done}))
    elif result.done:
        click.echo(
            f"queue {queue}: drained from store {result.source}, resumed on store"
            f" {result.target}; route it to {result.target} everywhere (if not done yet)"
        )
    else:
        click.echo(
            f"queue {queue}: {result.left} job(s) still in store {result.source} after"
            f" {timeout:g} s; it stays paused on store {result.target}. Switch the route,"
            " check that workers of the old store run, and run this command again"
        )
    if not result.done:
        exit_now(1)


@queues.command("pause-host")
@app_option
@json_option
@click.argument("hostname", callback=checked_name("hostname"))
def pause_host(app_path: str, as_json: bool, hostname: str) -> None:
    """Pause every worker of HOSTNAME (as `pgtasks workers` names it): none claims a job
    until resume-host; their running jobs finish."""
    _switch_host(app_path, hostname, as_json, pause=True)


@queues.command("resume-host")
@app_option
@json_option
@click.argument("hostname", callback=checked_name("hostname"))
def resume_host(app_path: str, as_json: bool, hostname: str) -> None:
    """Resume the workers of HOSTNAME."""
    _switch_host(app_path, hostname, as_json, pause=False)


def _switch_host(app_path: str, hostname: str, as_json: bool, *, pause: bool) -> None:
    app = load_app(app_path)
    with app:
        changed = guard(lambda: app.admin.pause_host(hostname, pause=pause))
        paused = guard(lambda: app.admin.paused_hosts())
    if as_json:
        click.echo(to_json({"hostname": hostname, "changed": changed, "paused_hosts": paused}))
    elif pause:
        click.echo(f"host {hostname}: {'paused' if changed else 'was paused already'}")
    else:
        click.echo(f"host {hostname}: {'resumed' if changed else 'was not paused'}")
