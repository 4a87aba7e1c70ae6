"""The commands a Celery user types: ``pgtasks -A proj inspect active|scheduled|reserved|
registered|stats|ping``, ``control revoke|terminate|rate_limit|cancel_consumer|
add_consumer``, ``result ID``; and the worker defaults a Celery app's settings give.

They answer from the database (workers' registrations, job rows), for a Celery-shaped
app (``pgtasks.celery.Celery``) and a plain pgtasks App alike.
"""

from __future__ import annotations

import json
import types
from typing import Any

import click
from click.core import ParameterSource

from .._errors import ConfigurationError, PgTasksError
from ._common import app_option, json_option


def _front(app_path: str) -> Any:
    """The Celery-shaped app ``-A`` names, or a stand-in over a plain App."""
    from .._app import loading

    try:
        value, _ = loading.find_app(app_path)
    except ConfigurationError as error:
        raise click.UsageError(str(error)) from None
    if hasattr(value, "conf") and hasattr(type(value), "__pgtasks_app__"):
        return value
    native = loading.app_of(value)
    if native is None:
        raise click.UsageError(f"{app_path!r} does not name a pgtasks App")
    return types.SimpleNamespace(native=native, conf=None)


def _print(document: Any, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(document, default=str, indent=2))
        return
    if isinstance(document, dict):
        if not document:
            click.echo("- empty -")
        for name, value in document.items():
            click.echo(f"-> {name}: {json.dumps(value, default=str)}")
        return
    click.echo(str(document))


VIEWS = ("active", "scheduled", "reserved", "registered", "stats", "ping")


@click.command()
@app_option
@click.argument("view", type=click.Choice(VIEWS))
@json_option
def inspect(app_path: str, view: str, as_json: bool) -> None:
    """Celery's inspect views, read from the database (every live worker answers)."""
    from ..celery.control import Inspect

    front = _front(app_path)
    try:
        document = getattr(Inspect(front), view)()
    except PgTasksError as error:
        click.echo(f"error: {error}", err=True)
        raise SystemExit(1) from None
    _print(document, as_json)


@click.group()
def control() -> None:
    """Celery's remote control: revoke, rate limits, consumers (queue pause/resume), pool
    sizes."""


@control.command("revoke")
@app_option
@click.argument("task_ids", nargs=-1, required=True)
@click.option("--terminate", is_flag=True, help="Cancel running jobs too.")
def revoke(app_path: str, task_ids: tuple[str, ...], terminate: bool) -> None:
    """Cancel jobs by id: one not started never runs (``--terminate``: running ones too)."""
    from ..celery.control import Control

    outcome = Control(_front(app_path)).revoke(list(task_ids), terminate=terminate)
    for task_id, status in outcome.items():
        click.echo(f"{task_id}: {status or 'no such job'}")


@control.command("terminate")
@app_option
@click.argument("signal", required=False)
@click.argument("task_ids", nargs=-1, required=True)
def terminate(app_path: str, signal: str | None, task_ids: tuple[str, ...]) -> None:
    """Cancel jobs by id, running ones included (the signal is not used)."""
    from ..celery.control import Control

    outcome = Control(_front(app_path)).revoke(list(task_ids), terminate=True)
    for task_id, status in outcome.items():
        click.echo(f"{task_id}: {status or 'no such job'}")


@control.command("rate_limit")
@app_option
@click.argument("task_name")
@click.argument("rate")
def rate_limit(app_path: str, task_name: str, rate: str) -> None:
    """Change the rate of any task at runtime (10/s, 100/m; 0 removes it): every worker
    obeys from its next claim; `pgtasks limits reset task:<name>` returns to the declared
    rate (see `pgtasks limits set`)."""
    from ..celery.control import Control
    from ..celery.exceptions import ImproperlyConfigured

    try:
        click.echo(Control(_front(app_path)).rate_limit(task_name, rate))
    except (ImproperlyConfigured, PgTasksError) as error:
        click.echo(f"error: {error}", err=True)
        raise SystemExit(1) from None


def _resize(app_path: str, worker: str, slots: int) -> None:
    from .._app import controls
    from .._app.actors import actor_here

    native = _front(app_path).native
    try:
        worker_id = controls.parse_worker(worker)
        with native:
            change = controls.resize_pool(native, worker_id, slots, actor=actor_here("control"))
    except PgTasksError as error:
        click.echo(f"error: {error}", err=True)
        raise SystemExit(1) from None
    click.echo(change.describe())


@control.command("pool_grow")
@app_option
@click.argument("worker")
@click.argument("n", type=click.IntRange(min=1), default=1)
def pool_grow(app_path: str, worker: str, n: int) -> None:
    """Give WORKER (its id, or pgtasks@host:pid:id) N more job slots (threads and event
    loop), up to the --max-concurrency it started with; waits for it to apply them."""
    _resize(app_path, worker, n)


@control.command("pool_shrink")
@app_option
@click.argument("worker")
@click.argument("n", type=click.IntRange(min=1), default=1)
def pool_shrink(app_path: str, worker: str, n: int) -> None:
    """Take N job slots from WORKER, down to the --min-concurrency it started with: its
    running jobs finish, and no new one starts while it runs as many as its new size."""
    _resize(app_path, worker, -n)


@control.command("cancel_consumer")
@app_option
@click.argument("queue")
def cancel_consumer(app_path: str, queue: str) -> None:
    """Pause a queue: no worker claims its jobs until add_consumer."""
    from ..celery.control import Control

    changed = Control(_front(app_path)).cancel_consumer(queue)
    click.echo(f"queue {queue!r} {'paused' if changed else 'was paused already'}")


@control.command("add_consumer")
@app_option
@click.argument("queue")
def add_consumer(app_path: str, queue: str) -> None:
    """Resume a paused queue."""
    from ..celery.control import Control

    changed = Control(_front(app_path)).add_consumer(queue)
    click.echo(f"queue {queue!r} {'resumed' if changed else 'was not paused'}")


@click.command()
@app_option
@click.argument("task_id")
@click.option("--traceback", "show_traceback", is_flag=True, help="Show the error's traceback.")
def result(app_path: str, task_id: str, show_traceback: bool) -> None:
    """A task's result by id (its state while it has none)."""
    from ..celery.result import AsyncResult

    front = _front(app_path)
    outcome = AsyncResult(task_id, app=front)
    state = outcome.state
    if show_traceback and outcome.traceback:
        click.echo(outcome.traceback)
    elif state == "SUCCESS":
        click.echo(json.dumps(outcome.result, default=str))
    elif state == "FAILURE":
        click.echo(f"{state}: {outcome.result}")
    else:
        click.echo(state)


def worker_defaults(ctx: click.Context, app_path: str) -> dict[str, Any]:
    """The worker options a Celery app's settings give (worker_concurrency, …), for the
    options not given on the command line."""
    front = _front(app_path)
    conf = front.conf
    if conf is None:
        return {}
    given = {
        name
        for name in ("concurrency", "prefetch", "max_tasks_per_child", "max_memory_per_child")
        if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE
    }
    found: dict[str, Any] = {}
    concurrency = conf.worker_concurrency
    if concurrency and "concurrency" not in given:
        found["concurrency"] = int(concurrency)
    multiplier = (
        conf.get("worker_prefetch_multiplier") if "worker_prefetch_multiplier" in conf else None
    )
    if multiplier is not None and "prefetch" not in given:
        slots = found.get("concurrency") or ctx.params.get("concurrency") or 1
        found["prefetch"] = max(int(multiplier) - 1, 0) * int(slots)
    if conf.worker_max_tasks_per_child and "max_tasks_per_child" not in given:
        found["max_tasks_per_child"] = int(conf.worker_max_tasks_per_child)
    if conf.worker_max_memory_per_child and "max_memory_per_child" not in given:
        found["max_memory_per_child"] = float(conf.worker_max_memory_per_child) / 1024.0  # KiB
    return found
