"""``pgtasks events emit`` and ``pgtasks jobs fork``: durable execution from the command
line (docs/howto/durable.md). Registered onto ``pgtasks.cli.main`` (and its ``jobs``
group) when ``pgtasks.cli`` is imported."""

from __future__ import annotations

import json
from typing import Any

import click

from .._errors import JobNotFoundError, PgTasksError
from .._operations import to_json
from ._common import app_option, guard, json_option, load_app

JOB_ID = click.IntRange(min=1, max=2**63 - 1)


def _payload(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError as error:
        raise click.BadParameter(f"not JSON ({error}): {value[:80]!r}") from None


@click.group()
def events() -> None:
    """Emit events that jobs wait for (ctx.wait_for_event)."""


@events.command("emit")
@app_option
@click.argument("key")
@click.option(
    "--payload",
    default=None,
    callback=_payload,
    metavar="JSON",
    help="The event's payload, a JSON document (default: null).",
)
@click.option(
    "--queue",
    default=None,
    metavar="NAME",
    help="The queue whose jobs wait: the event goes to its store (default: every store).",
)
@json_option
def emit_command(app_path: str, key: str, payload: Any, queue: str | None, as_json: bool) -> None:
    """Record an event of KEY and wake the jobs waiting for it (in the store of --queue,
    else in every store of the app). A job that starts waiting for KEY later finds it
    too."""
    app = load_app(app_path)
    with app:
        try:
            event_id = guard(lambda: app.emit_event(key, payload, queue=queue))
        except (ValueError, PgTasksError) as error:
            raise click.ClickException(str(error)) from None
    if as_json:
        click.echo(to_json({"id": event_id, "key": key}))
    else:
        click.echo(f"event {event_id} emitted: {key}")


@click.command("fork")
@app_option
@click.argument("job_id", type=JOB_ID)
@click.option(
    "--from-step",
    default=None,
    metavar="NAME",
    help="Reuse the checkpoints before the first occurrence of step NAME; it and what"
    " follows run again (default: reuse every checkpoint).",
)
@json_option
def fork_command(app_path: str, job_id: int, from_step: str | None, as_json: bool) -> None:
    """Start a new job of the same task and arguments as JOB_ID that reuses its durable
    steps' checkpoints (e.g. after fixing a bug in a later step)."""
    loaded = load_app(app_path)
    with loaded:
        app = guard(lambda: loaded.routing.for_id(job_id))
        try:
            handle = guard(lambda: app.fork_job(job_id, from_step=from_step))
        except JobNotFoundError:
            raise click.ClickException(f"job {job_id} does not exist") from None
        except (ValueError, PgTasksError) as error:
            raise click.ClickException(str(error)) from None
    if as_json:
        click.echo(to_json({"id": handle.id, "forked_from": job_id, "from_step": from_step}))
    else:
        click.echo(f"job {handle.id} forked from job {job_id}")
