"""Operations commands: ``pgtasks stats``, ``jobs list|show|retry|cancel|delete``,
``workers``, ``prune``. Registered onto ``pgtasks.cli.main`` when ``pgtasks.cli`` is imported.

Each command reads or writes through the App's Store (reads never use SKIP LOCKED) and
prints a table or, with ``--json``, one JSON document. A job id that does not exist is a
one-line ``error:`` and exit code 1; malformed options are click usage errors (exit 2).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click
import psycopg

from .._app import repairs
from .._app.app import App
from .._durable_text import format_steps, step_as_json
from .._errors import JobNotFoundError
from .._jobs import TERMINATE_NOTE
from .._operations import (
    DURATION_FORMS,
    NEVER,
    STATUSES,
    format_job,
    format_jobs,
    format_prune,
    format_stats,
    format_workers,
    job_as_json,
    parse_duration,
    to_json,
)
from .._running import format_running
from .._worker.pruner import DEFAULT_BATCH_SIZE, prune
from ._common import app_option, checked_name, guard, json_option, load_app
from ._stores import each_store, echo_each, store_option

T = TypeVar("T")

#: Job ids are bigint; --limit and --batch-size are int in SQL.
JOB_ID = click.IntRange(min=1, max=2**63 - 1)
SQL_INT = click.IntRange(min=1, max=2**31 - 1)
#: Longest duration an option accepts (about 3,000 years): make_interval's range.
MAX_DURATION = 1e11

RETRY_RULE = repairs.RETRY_RULE


def _duration(*, allow_never: bool = False) -> Callable[..., float | None]:
    """An option callback parsing ``90``, ``30s``, ``15m``, ``12h``, ``1d``, ``2w`` (and,
    with ``allow_never``, ``never``: None) into seconds; anything else is a usage error.
    """

    def convert(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
        if value is None:
            return None
        if allow_never and value.strip().lower() == NEVER:
            return None
        try:
            seconds = parse_duration(value)
        except ValueError:
            forms = DURATION_FORMS + (f", or {NEVER!r}" if allow_never else "")
            raise click.BadParameter(f"{value!r} is not a duration: use {forms}") from None
        if not seconds <= MAX_DURATION:
            raise click.BadParameter(f"{value!r} is too long a duration (at most 3000 years)")
        return seconds

    return convert


def _run(app: App, operation: Callable[[psycopg.Connection[Any]], T], describe: str) -> T:
    """Run ``operation`` on a pooled connection; pgtasks errors exit 1 with one line."""
    result: T = guard(lambda: app.database.run(operation))
    return result


def _read(app: App, operation: Callable[[psycopg.Connection[Any]], T]) -> T:
    """Run a read that may lag on the app's replica when it has one (else as ``_run``)."""
    result: T = guard(lambda: app.database.read(operation))
    return result


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


def _missing(job_id: int) -> NoReturn:
    _fail(str(JobNotFoundError(f"job {job_id} does not exist (it may have been pruned)")))


# -- stats ----------------------------------------------------------------------------------------
@click.command()
@app_option
@store_option
@json_option
def stats(app_path: str, store: str | None, as_json: bool) -> None:
    """Jobs per queue and status, oldest due job's wait, recent throughput, live workers.

    Counts read every row, including rows workers hold locked (no SKIP LOCKED); on the
    app's replica when it has one (replica_dsn).
    """
    app = load_app(app_path)
    with app:
        results = each_store(
            app,
            lambda owner: owner.database.read(lambda conn: owner.admin.collect_stats(conn)),
            store,
        )
    echo_each(app, results, as_json=as_json, document=lambda r: r.as_json(), text=format_stats)


# -- jobs -----------------------------------------------------------------------------------------
@click.group()
def jobs() -> None:
    """List, show, retry, cancel and delete jobs."""


@jobs.command("list")
@app_option
@click.option("--status", type=click.Choice(STATUSES), default=None, help="Only this status.")
@click.option("--queue", default=None, callback=checked_name("queue"), help="Only this queue.")
@click.option(
    "--task",
    "task_name",
    default=None,
    callback=checked_name("task name"),
    help="Only this task name.",
)
@click.option(
    "--workflow",
    "workflow_id",
    default=None,
    type=JOB_ID,
    metavar="ID",
    help="Only the jobs of this workflow (pgtasks workflows list).",
)
@click.option(
    "--limit", default=50, show_default=True, type=SQL_INT, metavar="N", help="Most jobs listed."
)
@store_option
@json_option
def list_command(
    app_path: str,
    status: str | None,
    queue: str | None,
    task_name: str | None,
    workflow_id: int | None,
    limit: int,
    store: str | None,
    as_json: bool,
) -> None:
    """The newest jobs first, optionally filtered (on the app's replica when it has one)."""
    app = load_app(app_path)
    with app:
        names = None if workflow_id is None else [guard(lambda: app.routing.for_id(workflow_id))]
        results = each_store(
            app,
            lambda owner: (
                owner.database.read(
                    lambda conn: owner.queries.list_jobs(
                        conn,
                        status=status,
                        queue=queue,
                        task_name=task_name,
                        workflow_id=workflow_id,
                        limit=limit,
                    )
                )
                if names is None or owner.store_name == names[0].store_name
                else (None, [])
            ),
            store,
        )
    echo_each(
        app,
        results,
        as_json=as_json,
        document=lambda listed: [job_as_json(job) for job in listed[1]],
        text=lambda listed: format_jobs(*listed) if listed[0] is not None else "no jobs",
    )


@jobs.command("show")
@app_option
@click.argument("job_id", type=JOB_ID)
@json_option
def show_command(app_path: str, job_id: int, as_json: bool) -> None:
    """Every field of one job: arguments, result, and last error with its traceback."""
    loaded = load_app(app_path)
    with loaded:
        app = guard(lambda: loaded.routing.for_id(job_id))  # the store that issued the id

        def read(conn: psycopg.Connection[Any]) -> Any:
            return (
                app.queries.get_job(conn, job_id),
                app.queries.get_database_time(conn),
                app.queries.get_job_workflow(conn, job_id),
                app.queries.get_job_steps(conn, job_id),
            )

        job, now, workflow, steps = _run(app, read, "show job")
    if job is None:
        _missing(job_id)
    if as_json:
        document = job_as_json(job)
        if workflow is not None:
            document["workflow"] = {
                "id": workflow["workflow_id"],
                "step": workflow["workflow_step"],
            }
        document["steps"] = [step_as_json(step) for step in steps]
        click.echo(to_json(document))
        return
    extra = []
    if workflow is not None:
        extra.append(
            (
                "workflow",
                f"{workflow['workflow_id']} (step {workflow['workflow_step']};"
                f" pgtasks workflows show {workflow['workflow_id']})",
            )
        )
    text = format_job(job, now, extra_fields=extra)
    click.echo(text if not steps else f"{text}\n{format_steps(steps)}")


@jobs.command(
    "retry",
    help="Put a failed or cancelled job (ID), or every failed job, back to pending, due"
    " now.\n\n" + RETRY_RULE,
)
@app_option
@click.argument("job_id", type=JOB_ID, required=False)
@click.option("--all-failed", is_flag=True, help="Retry every failed job (see --task).")
@click.option(
    "--keep-steps",
    is_flag=True,
    help="A durable job keeps its checkpoints before its first failed step (they replay,"
    " as a fork's do); default: it runs from the top without them.",
)
@click.option(
    "--task",
    "task_name",
    default=None,
    callback=checked_name("task name"),
    help="With --all-failed: only this task.",
)
@json_option
def retry_command(
    app_path: str,
    job_id: int | None,
    all_failed: bool,
    keep_steps: bool,
    task_name: str | None,
    as_json: bool,
) -> None:
    if (job_id is None) == (not all_failed):
        raise click.UsageError("give either a job ID or --all-failed")
    if keep_steps and all_failed:
        raise click.UsageError("--keep-steps retries one job (an ID), not --all-failed")
    if task_name is not None and not all_failed:
        raise click.UsageError("--task filters --all-failed; it cannot be used with a job ID")
    app = load_app(app_path)
    with app:
        if job_id is not None:
            _retry_one(app, job_id, as_json, keep_steps)
        else:
            _retry_all_failed(app, task_name, as_json)


def _retry_one(app: App, job_id: int, as_json: bool, keep_steps: bool) -> None:
    # A missing job is a one-line error (JobNotFoundError) from guard.
    result: repairs.RetryResult = guard(lambda: app.admin.retry_job(job_id, keep_steps=keep_steps))
    if not result.retried:
        _fail(result.refusal)
    if as_json:
        document = {
            "id": job_id,
            "retried": True,
            "previous_status": result.previous_status,
            "status": result.status,
            "attempts": result.attempts,
            "max_attempts": result.max_attempts,
        }
        if keep_steps:
            document["steps_kept"] = result.steps_kept
        click.echo(to_json(document))
    elif result.status == "waiting":
        click.echo(
            f"job {job_id} retried: {result.previous_status} -> waiting for the earlier steps"
            " of its workflow; it starts with its input when they are done"
        )
    elif result.max_attempts is None:
        click.echo(
            f"job {job_id} retried: {result.previous_status} -> pending, due now, with its"
            " input from the earlier steps of its workflow"
        )
    else:
        click.echo(
            f"job {job_id} retried: {result.previous_status} -> pending, due now"
            f" ({result.attempts} attempt(s) so far, max_attempts {result.max_attempts})"
            + (f", {result.steps_kept} checkpoint(s) kept" if keep_steps else "")
        )


def _retry_all_failed(app: App, task_name: str | None, as_json: bool) -> None:
    ids: list[int] = []
    for owner in app.routing.serving():  # every store of an app of several
        ids.extend(guard(lambda owner=owner: owner.admin.retry_failed_jobs(task_name)))
    if as_json:
        click.echo(to_json({"retried": len(ids), "ids": ids, "task": task_name}))
        return
    which = f" of task {task_name}" if task_name else ""
    listed = ": " + ", ".join(map(str, ids[:20])) + (" …" if len(ids) > 20 else "") if ids else ""
    click.echo(f"retried {len(ids)} failed job(s){which}{listed}")


@jobs.command("delete")
@app_option
@click.argument("job_id", type=JOB_ID)
@json_option
def delete_command(app_path: str, job_id: int, as_json: bool) -> None:
    """Delete one finished (done, failed or cancelled) job.

    A pending or running job is not deleted (cancel it first), nor a job of a workflow
    that has not finished (its later steps read its result): both exit 1.
    """
    app = load_app(app_path)
    with app:
        deleted, status = guard(lambda: app.admin.delete_finished_job(job_id))
    if not deleted:
        _fail(f"job {job_id} is {status}: only finished jobs can be deleted (cancel it first)")
    if as_json:
        click.echo(to_json({"id": job_id, "deleted": True, "status": status}))
    else:
        click.echo(f"job {job_id} deleted (it was {status})")


@jobs.command("cancel")
@app_option
@click.argument("job_id", type=JOB_ID)
@click.option(
    "--terminate",
    is_flag=True,
    help="Kill a running attempt: a process job's child is killed, an async job's task"
    " cancelled; a thread job cannot be killed (it gets the cancel flag only).",
)
@json_option
def cancel_command(app_path: str, job_id: int, terminate: bool, as_json: bool) -> None:
    """Cancel a job: pending jobs never run; running jobs are asked to stop.

    Cancelling a finished job changes nothing and says so (exit code 0).
    """
    app = load_app(app_path)
    with app:
        result = guard(lambda: app.cancel(job_id, terminate=terminate))
    outcome: str = result.outcome
    status = str(result.status)
    if as_json:
        document: dict[str, Any] = {"id": job_id, "outcome": outcome, "status": status}
        click.echo(to_json({**document, "terminate": True} if terminate else document))
    elif outcome == "cancelled":
        click.echo(f"job {job_id} cancelled: it was pending and will not run")
    elif outcome == "requested" and terminate:
        click.echo(f"job {job_id} is running: termination requested; {TERMINATE_NOTE}")
    elif outcome == "requested":
        click.echo(
            f"job {job_id} is running: cancellation requested; its worker stops it and"
            " records it as cancelled"
        )
    else:
        click.echo(f"job {job_id} already finished ({status}): nothing to cancel")


# -- workers --------------------------------------------------------------------------------------
@click.command()
@app_option
@click.option(
    "--since",
    metavar="DURATION",
    default="1h",
    callback=_duration(),
    show_default=True,
    help=f"Also list workers removed within this long ({DURATION_FORMS}).",
)
@store_option
@json_option
def workers(app_path: str, since: float, store: str | None, as_json: bool) -> None:
    """Live workers and recently stopped or lost ones, with heartbeat age and running jobs,
    then what runs where: each running job's worker, host, task, attempt, runtime and
    arguments (cut at 200 characters, escaped).

    States: live (heartbeat within the lease), silent (registered but past the lease, not
    yet removed), stopped (deregistered at shutdown), lost (removed by a rescuer after a
    lease without heartbeat), unknown (holds running jobs but is in neither table).
    """
    app = load_app(app_path)

    def read(owner: App, conn: psycopg.Connection[Any]) -> Any:
        now, infos = owner.admin.read_workers(conn, since=since)
        return now, infos, owner.admin.read_running(conn)

    with app:
        results = each_store(
            app, lambda owner: owner.database.run(lambda conn: read(owner, conn)), store
        )
    echo_each(
        app,
        results,
        as_json=as_json,
        document=lambda read: {
            "now": read[0],
            "lease_timeout": app.lease_timeout,
            "workers": [info.as_json() for info in read[1]],
            "running": [job.as_json() for job in read[2]],
        },
        text=lambda read: f"{format_workers(read[0], read[1])}\n\n{format_running(read[2])}",
    )


# -- prune ----------------------------------------------------------------------------------------
@click.command("prune")
@app_option
@click.option(
    "--done-older-than",
    "done_after",
    metavar="DURATION",
    default=None,
    callback=_duration(allow_never=True),
    help="Delete done jobs finished longer ago than this [default: the app's"
    f" prune_done_after, 1d unless configured; {NEVER!r}: keep them].",
)
@click.option(
    "--failed-older-than",
    "failed_after",
    metavar="DURATION",
    default=None,
    callback=_duration(allow_never=True),
    help="Delete failed and cancelled jobs finished longer ago than this [default: the"
    f" app's prune_failed_after, 7d unless configured; {NEVER!r}: keep them].",
)
@click.option(
    "--batch-size",
    default=DEFAULT_BATCH_SIZE,
    show_default=True,
    type=SQL_INT,
    metavar="N",
    help="Rows per DELETE; each batch is its own short transaction.",
)
@store_option
@json_option
@click.pass_context
def prune_command(
    ctx: click.Context,
    app_path: str,
    done_after: float | None,
    failed_after: float | None,
    batch_size: int,
    store: str | None,
    as_json: bool,
) -> None:
    """Delete finished jobs past their retention, in batches; never pending or running jobs.

    Durations: seconds (90) or 30s, 15m, 12h, 1d, 2w; 0 deletes every finished job of
    that kind and never keeps them. Workers also prune automatically (App(prune_done_after=...,
    prune_failed_after=..., prune_interval=...)).
    """
    app = load_app(app_path)
    if _defaulted(ctx, "done_after"):
        done_after = app.prune_done_after
    if _defaulted(ctx, "failed_after"):
        failed_after = app.prune_failed_after
    with app:
        results = each_store(
            app,
            lambda owner: owner.database.run(
                lambda conn: prune(
                    owner.queries,
                    conn,
                    done_after=done_after,
                    failed_after=failed_after,
                    batch_size=batch_size,
                )
            ),
            store,
        )

    def document(result: Any) -> dict[str, Any]:
        pruned: dict[str, Any] = result.as_json()
        pruned["done_older_than"] = done_after
        pruned["failed_older_than"] = failed_after
        return pruned

    echo_each(
        app,
        results,
        as_json=as_json,
        document=document,
        text=lambda result: format_prune(result, done_after=done_after, failed_after=failed_after),
    )


def _defaulted(ctx: click.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is None or source is click.core.ParameterSource.DEFAULT
