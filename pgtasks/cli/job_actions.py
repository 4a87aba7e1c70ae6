"""``pgtasks jobs run-now|snooze|edit``: the dashboard's job actions from a shell
(``pgtasks._app.job_actions``): race-safe against a claim in progress, audited (who: the
OS user, or ``--who``), refused on a read-only or unmigrated database with one line.

A job left alone (it does not exist, is not pending, or is due already for run-now) is
named with why, and the command exits 1; malformed options are usage errors (exit 2).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

import click

from .._app import job_actions, pending_jobs
from .._app.actors import actor_here
from .._job_filter import JobFilter
from .._operations import DURATION_FORMS, parse_duration, to_json
from ._common import app_option, checked_name, guard, json_option, load_app

JOB_ID = click.IntRange(min=1, max=2**63 - 1)

who_option = click.option(
    "--who",
    default=None,
    metavar="NAME",
    help="Who acts, as the audit records it (default: the OS user and host).",
)


def _actor(who: str | None) -> str:
    if who is None:
        return actor_here("cli")
    text = who.strip()
    if not text or len(text) > 200 or not text.isprintable():
        raise click.BadParameter(
            "give a printable name of at most 200 characters", param_hint="--who"
        )
    return f"cli:{text}"


def _report(outcome: job_actions.JobsChanged, verb: str, as_json: bool) -> None:
    if as_json:
        document = {
            "action": outcome.action,
            "done": list(outcome.done),
            "left": {str(job_id): reason for job_id, reason in outcome.left.items()},
        }
        click.echo(to_json(document))
    else:
        if outcome.done:
            listed = ", ".join(map(str, outcome.done[:20])) + (
                " …" if len(outcome.done) > 20 else ""
            )
            click.echo(f"{len(outcome.done)} job(s) {verb}: {listed}")
        for job_id, reason in list(outcome.left.items())[: job_actions.EXPLAINED]:
            click.echo(f"error: job {job_id} {reason}: not {verb}", err=True)
        if len(outcome.left) > job_actions.EXPLAINED:
            click.echo(f"error: {len(outcome.left)} job(s) not {verb} in all", err=True)
    if outcome.left:
        sys.exit(1)


@click.command("run-now")
@app_option
@click.argument("job_ids", nargs=-1, type=JOB_ID, metavar="[ID]...")
@click.option(
    "--all-scheduled",
    is_flag=True,
    help="Every pending job scheduled later (with --task and/or --queue: of those only).",
)
@click.option(
    "--task",
    "task_name",
    default=None,
    callback=checked_name("task name"),
    help="With --all-scheduled: only this task.",
)
@click.option(
    "--queue",
    default=None,
    callback=checked_name("queue"),
    help="With --all-scheduled: only this queue.",
)
@who_option
@json_option
def run_now_command(
    app_path: str,
    job_ids: tuple[int, ...],
    all_scheduled: bool,
    task_name: str | None,
    queue: str | None,
    who: str | None,
    as_json: bool,
) -> None:
    """Make pending jobs scheduled later (a countdown, an eta, a retry's delay) due now.

    No attempt is spent. A job a worker claims at that moment is either changed before the
    claim or left (it started). Each change is audited (`pgtasks limits audit`)."""
    if bool(job_ids) == all_scheduled:
        raise click.UsageError("give job IDs or --all-scheduled")
    if (task_name or queue) and not all_scheduled:
        raise click.UsageError("--task and --queue filter --all-scheduled; not with job IDs")
    actor = _actor(who)
    app = load_app(app_path)
    with app:
        if all_scheduled:
            job_filter = JobFilter(task_name=task_name, queue=queue, due=False)
            count = guard(lambda: job_actions.run_matching_now(app, job_filter, actor=actor))
            if as_json:
                click.echo(to_json({"action": "run_now", "count": count}))
            else:
                click.echo(f"{count} scheduled job(s) due now")
            return
        outcome = guard(lambda: job_actions.run_jobs_now(app, job_ids, actor=actor))
    _report(outcome, "due now", as_json)


def _duration(ctx: click.Context, param: click.Parameter, value: str) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a duration: use {DURATION_FORMS}") from None
    if not 0 < seconds <= pending_jobs.MAX_SNOOZE:
        raise click.BadParameter(f"{value!r}: snooze by more than 0 and at most 10 years")
    return seconds


@click.command("snooze")
@app_option
@click.argument("job_ids", nargs=-1, required=True, type=JOB_ID, metavar="ID...")
@click.option(
    "--by",
    "seconds",
    required=True,
    callback=_duration,
    metavar="DURATION",
    help="How much later: seconds (90) or 30s, 15m, 1h, 1d, 2w.",
)
@who_option
@json_option
def snooze_command(
    app_path: str, job_ids: tuple[int, ...], seconds: float, who: str | None, as_json: bool
) -> None:
    """Start pending jobs later by --by (from now when they are due already).

    No attempt is spent; a job a worker claims at that moment is either snoozed before the
    claim or left (it started). Audited."""
    actor = _actor(who)
    app = load_app(app_path)
    with app:
        outcome = guard(lambda: job_actions.snooze_jobs(app, job_ids, seconds, actor=actor))
    _report(outcome, "snoozed", as_json)


def _json(kind: type, example: str) -> Any:
    def convert(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
        if value is None:
            return None
        try:
            decoded = json.loads(value)
        except ValueError as error:
            raise click.BadParameter(f"not JSON: {error}") from None
        if not isinstance(decoded, kind):
            raise click.BadParameter(f"must be a JSON {example}")
        return decoded

    return convert


@click.command("edit")
@app_option
@click.argument("job_id", type=JOB_ID)
@click.option(
    "--args",
    "-a",
    "args",
    default=None,
    callback=_json(list, "array, e.g. '[\"a@example.com\"]'"),
    metavar="JSON",
    help="The new positional arguments, a JSON array (not given: kept).",
)
@click.option(
    "--kwargs",
    "-k",
    "kwargs",
    default=None,
    callback=_json(dict, 'object, e.g. \'{"name": "Ada"}\''),
    metavar="JSON",
    help="The new keyword arguments, a JSON object (not given: kept).",
)
@who_option
@json_option
def edit_command(
    app_path: str,
    job_id: int,
    args: list[Any] | None,
    kwargs: Mapping[str, Any] | None,
    who: str | None,
    as_json: bool,
) -> None:
    """Give a pending job new arguments, checked as an enqueue of its task checks them.

    A job that started (or ended) meanwhile is left as it is (exit 1). Audited, with the
    arguments before and after."""
    if args is None and kwargs is None:
        raise click.UsageError("give --args, --kwargs or both")
    actor = _actor(who)
    app = load_app(app_path)
    with app:

        def edit() -> None:
            try:
                job_actions.edit_job_arguments(app, job_id, args=args, kwargs=kwargs, actor=actor)
            except (TypeError, ValueError) as error:
                click.echo(f"error: job {job_id}: arguments refused: {error}", err=True)
                sys.exit(1)

        guard(edit)
    if as_json:
        click.echo(to_json({"id": job_id, "edited": True}))
    else:
        click.echo(f"job {job_id}: arguments saved")
