"""``pgtasks call``, ``pgtasks purge`` and ``pgtasks tasks list``: enqueue from a shell,
delete pending jobs, and list the app's registered tasks (Celery's ``call``, ``purge`` and
``inspect registered``).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click

from .._app.app import App
from .._app.repairs import PurgeCount
from .._app.tasks import Task
from .._errors import PgTasksError
from .._operations import format_duration, format_table, to_json
from .._payload import MAX_JSON_DEPTH, json_depth, nested_deeper_than
from .._text import printable
from ._common import app_option, checked_name, guard, json_option, load_app

INT32 = click.IntRange(min=-(2**31), max=2**31 - 1)


def _json_value(kind: type, example: str) -> Any:
    def convert(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
        if value is None:
            return None
        if nested_deeper_than(value, MAX_JSON_DEPTH):
            raise click.BadParameter(
                f"nested {json_depth(value)} levels deep (arrays and objects), past the"
                f" {MAX_JSON_DEPTH} levels pgtasks stores"
            )
        try:
            decoded = json.loads(value)
        except RecursionError:
            raise click.BadParameter("nested too deeply to decode") from None
        except ValueError as error:
            raise click.BadParameter(f"not JSON ({error}); e.g. {example}") from None
        if not isinstance(decoded, kind):
            raise click.BadParameter(
                f"must be a JSON {'array' if kind is list else 'object'}, e.g. {example}"
            )
        return decoded

    return convert


def _eta(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    text = value.strip()
    try:
        # Python 3.10's fromisoformat does not read a trailing Z.
        moment = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an ISO 8601 date and time, e.g. 2026-05-01T09:30:00+02:00"
        ) from None
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise click.BadParameter(
            f"{value!r} has no time zone, so pgtasks cannot tell when it is: add one, e.g."
            f" {text}+00:00 or {text}Z (or use --countdown SECONDS)"
        )
    return moment


# -- call -----------------------------------------------------------------------------------------
@click.command()
@app_option
@click.argument("task_name", metavar="TASK")
@click.option(
    "-a",
    "--args",
    "args",
    metavar="JSON",
    callback=_json_value(list, "'[1, \"two\"]'"),
    help="Positional arguments as a JSON array, e.g. '[\"a@example.com\"]'.",
)
@click.option(
    "-k",
    "--kwargs",
    "kwargs",
    metavar="JSON",
    callback=_json_value(dict, '\'{"to": "a@example.com"}\''),
    help='Keyword arguments as a JSON object, e.g. \'{"to": "a@example.com"}\'.',
)
@click.option(
    "--queue",
    default=None,
    callback=checked_name("queue"),
    help="Queue to put the job in [default: the task's].",
)
@click.option(
    "--countdown",
    type=click.FloatRange(min=0, max=1e9),
    default=None,
    metavar="SECONDS",
    help="Run no earlier than this many seconds from now (the database's clock).",
)
@click.option(
    "--eta",
    default=None,
    callback=_eta,
    metavar="DATETIME",
    help="Run no earlier than this ISO 8601 time with a zone, e.g. 2026-05-01T09:30:00Z.",
)
@click.option(
    "--priority",
    type=INT32,
    default=None,
    metavar="N",
    help="Higher runs first [default: the task's].",
)
@click.option(
    "--idempotency-key",
    default=None,
    metavar="KEY",
    help="Enqueue at most once per key: an existing job with this key is returned.",
)
@json_option
def call(
    app_path: str,
    task_name: str,
    args: list[Any] | None,
    kwargs: dict[str, Any] | None,
    queue: str | None,
    countdown: float | None,
    eta: datetime | None,
    priority: int | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Enqueue a job of TASK (a registered task's name) and print its id.

    Arguments are checked against the task's signature before anything is written. With
    --idempotency-key, a job that already has the key is printed instead of a new one
    (stderr says so).
    """
    if countdown is not None and eta is not None:
        raise click.UsageError("give --countdown or --eta, not both")
    app = load_app(app_path)
    task = guard(lambda: app.get_task(task_name))
    options: dict[str, Any] = {
        "countdown": countdown,
        "eta": eta,
        "queue": queue,
        "priority": priority,
        "idempotency_key": idempotency_key,
    }
    with app:
        try:
            job = task.apply_async(args or [], kwargs or {}, **options)
        except PgTasksError as error:
            click.echo(f"error: {error}", err=True)
            raise SystemExit(1) from None
        except (TypeError, ValueError) as error:
            # Arguments that do not fit the signature, an invalid key: nothing was written.
            raise click.UsageError(str(error)) from None
    if as_json:
        click.echo(
            to_json(
                {
                    "id": job.id,
                    "task": task.name,
                    "queue": queue or task.queue,
                    "existed": job.existed,
                }
            )
        )
        return
    if job.existed:
        click.echo(
            f"a job with idempotency key {printable(idempotency_key or '')!s} exists: job"
            f" {job.id} (nothing enqueued)",
            err=True,
        )
    click.echo(job.id)


# -- purge ----------------------------------------------------------------------------------------
@click.command()
@app_option
@click.option(
    "--queue",
    default=None,
    callback=checked_name("queue"),
    help="Only jobs of this queue.",
)
@click.option(
    "--task",
    "task_name",
    default=None,
    callback=checked_name("task name"),
    help="Only jobs of this task.",
)
@click.option(
    "-y",
    "--yes",
    "-f",
    "--force",
    "yes",
    is_flag=True,
    help="Delete without asking for confirmation.",
)
@json_option
def purge(
    app_path: str, queue: str | None, task_name: str | None, yes: bool, as_json: bool
) -> None:
    """Delete pending jobs (all, or of a queue or a task) after a confirmation.

    Only jobs that are pending (due or scheduled) are deleted; running and finished jobs,
    and steps of workflows (cancel those with pgtasks workflows cancel), are left alone.
    Jobs enqueued after the count was shown are kept. There is no undo.
    """
    loaded = load_app(app_path)
    scope = _scope(queue, task_name)
    with loaded:
        if not loaded.store_router.single and queue is None:
            raise click.UsageError(
                f"this app has stores {', '.join(loaded.store_router.names)}: name the queue"
                " (--queue) whose store to purge"
            )
        app = loaded if queue is None else loaded.routing.for_queue(queue)
        count: PurgeCount = guard(lambda: app.admin.count_purgeable(queue, task_name))
        if count.jobs == 0:
            deleted = 0
        else:
            if not yes:
                _confirm(f"Delete {count.jobs} pending job(s){scope}? There is no undo.")
            deleted = guard(lambda: app.admin.purge_jobs(queue, task_name, count.max_id))
    if as_json:
        document = {
            "deleted": deleted,
            "queue": queue,
            "task": task_name,
            "workflow_jobs_left": count.workflow_jobs,
        }
        click.echo(to_json(document))
        return
    click.echo(f"purged {deleted} pending job(s){scope}")
    if count.workflow_jobs:
        click.echo(
            f"left {count.workflow_jobs} pending step(s) of workflows: cancel a workflow with"
            " pgtasks workflows cancel ID"
        )


def _confirm(question: str) -> None:
    """Ask on the terminal; anything but yes (or no answer at all) deletes nothing."""
    try:
        answer = click.confirm(question, default=False, err=True)
    except click.Abort:  # end of input: no answer
        answer = False
        click.echo("", err=True)
    if not answer:
        click.echo("nothing deleted (pass --yes to delete without asking)", err=True)
        raise SystemExit(1)


def _scope(queue: str | None, task_name: str | None) -> str:
    parts = []
    if queue is not None:
        parts.append(f"of queue {printable(queue)}")
    if task_name is not None:
        parts.append(f"of task {printable(task_name)}")
    return (" " + " and ".join(parts)) if parts else ""


# -- tasks list -----------------------------------------------------------------------------------
@click.group()
def tasks() -> None:
    """The app's registered tasks."""


@tasks.command("list")
@app_option
@json_option
def list_tasks(app_path: str, as_json: bool) -> None:
    """Registered tasks with their options: queue, priority, attempts and backoff, time
    limits, executor, limits, uniqueness and schedules (no database needed)."""
    app = load_app(app_path)
    described = [
        describe_task(app, task) for name, task in sorted(app.tasks.items()) if name == task.name
    ]
    if as_json:
        click.echo(to_json({"tasks": described}))
    elif not described:
        click.echo(f"no tasks registered in {app_path}")
    else:
        click.echo(format_tasks(described))


def describe_task(app: App, task: Task[Any, Any]) -> dict[str, Any]:
    """One task's options as JSON-ready values (``tasks list --json``)."""
    limits = task.limits
    uniqueness = task.uniqueness
    schedules = [s for s in app.schedules.values() if s.task_name == task.name]
    if uniqueness is None:
        unique = None
    else:
        unique = {
            "scope": "active"
            if uniqueness.while_active
            else ("period" if uniqueness.period is not None else "life"),
            "period": uniqueness.period.total_seconds() if uniqueness.period else None,
            "key": "computed" if uniqueness.key is not None else "given at enqueue",
        }
    return {
        "name": task.name,
        "queue": task.queue,
        "priority": task.priority,
        "max_attempts": task.max_attempts,
        "retry_backoff": task.retry_backoff,
        "retry_backoff_max": task.retry_backoff_max,
        "retry_jitter": task.retry_jitter,
        "dont_retry": [f"{t.__module__}.{t.__qualname__}" for t in task.dont_retry],
        "timeout": task.timeout,
        "soft_timeout": task.soft_timeout,
        "executor": task.executor or ("async" if task.is_async else None),
        "concurrency": limits.concurrency if limits else None,
        "concurrency_per_key": bool(limits and limits.concurrency_key is not None),
        "rate_limit": str(limits.rate) if limits and limits.rate else None,
        "unique": unique,
        "schedules": [{"name": s.name, "trigger": s.trigger.describe()} for s in schedules],
    }


def _seconds(value: float | None) -> str:
    return "-" if value is None else format_duration(value)


def format_tasks(described: list[dict[str, Any]]) -> str:
    headers = [
        "TASK",
        "QUEUE",
        "PRIORITY",
        "ATTEMPTS",
        "BACKOFF",
        "TIMEOUT",
        "EXECUTOR",
        "LIMITS",
        "UNIQUE",
        "SCHEDULES",
    ]
    rows = []
    for task in described:
        backoff = f"{_seconds(task['retry_backoff'])}..{_seconds(task['retry_backoff_max'])}"
        if task["retry_jitter"]:
            backoff += " jitter"
        timeout = _seconds(task["timeout"])
        if task["soft_timeout"] is not None:
            timeout += f" (soft {_seconds(task['soft_timeout'])})"
        limits = []
        if task["concurrency"] is not None:
            per_key = " per key" if task["concurrency_per_key"] else ""
            limits.append(f"concurrency {task['concurrency']}{per_key}")
        if task["rate_limit"]:
            limits.append(f"rate {task['rate_limit']}")
        unique = task["unique"]
        if unique is None:
            unique_text = "-"
        elif unique["scope"] == "period":
            unique_text = f"per {_seconds(unique['period'])}"
        else:
            unique_text = "while active" if unique["scope"] == "active" else "for life"
        rows.append(
            [
                printable(task["name"]),
                printable(task["queue"]),
                task["priority"],
                task["max_attempts"],
                backoff,
                timeout,
                task["executor"] or "worker's",
                ", ".join(limits) or "-",
                unique_text,
                ", ".join(printable(s["trigger"]) for s in task["schedules"]) or "-",
            ]
        )
    return format_table(headers, rows)


__all__ = ["call", "describe_task", "purge", "tasks"]
