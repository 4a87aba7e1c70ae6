"""``pgtasks limits``: the stored concurrency and rate limits and the jobs
running under each (per key for per-key limits); of every store of an app of several
(each store keeps the limits of the tasks and queues it serves), or of ``--store``.

``limits set|pause|resume|reset`` change them at runtime (stored in the database: every
worker of every host obeys from its next claim; audited), ``limits audit`` lists who
changed what."""

from __future__ import annotations

import json
from typing import Any

import click

from .._app import controls
from .._app.actors import actor_here
from .._app.flow_stats import FlowStats, flow_stats
from .._app.keyed_admin import LimitsView, format_keyed, limits_view, release_sequence
from .._limits import format_limits
from .._operations import format_table
from ._common import app_option, checked_name, guard, json_option, load_app, optional_app_option
from ._stores import each_store, echo_each, store_option

name_argument = click.argument("name")


@click.group(invoke_without_command=True)
@optional_app_option
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of text.")
@click.pass_context
def limits(ctx: click.Context, app_path: str | None, store: str | None, as_json: bool) -> None:
    """Every stored limit: concurrency, rate, tokens left, running, pending and held-back
    jobs; then the busiest keys of per-key limits, the busiest and starved fair keys, and
    the sequences (head, length, held by a failed job). Its commands change a limit at
    runtime (set, pause, resume, reset) and list the changes (audit)."""
    if ctx.invoked_subcommand is not None:
        return
    if app_path is None:
        raise click.UsageError("Missing option '-A' / '--app'.")
    app = load_app(app_path)
    with app:
        results = each_store(app, lambda one: (limits_view(one), flow_stats(one)), store)

    def document(read: tuple[LimitsView, FlowStats]) -> dict[str, Any]:
        view, flow = read
        states = view.limits
        return {
            "limits": [state.as_json() for state in states],
            "keys": [
                {"name": state.name, **key.as_json()} for state in states for key in state.top_keys
            ],
            **view.keyed.as_dict(),
            **flow.as_json(),  # debounce and batches (docs/howto/flow-control.md)
        }

    def text(read: tuple[LimitsView, FlowStats]) -> str:
        view, flow = read
        parts = [format_limits(view.limits), format_keyed(view.keyed), flow.text()]
        return "\n\n".join(part for part in parts if part)

    echo_each(app, results, as_json=as_json, document=document, text=text)


def _report(change: controls.LimitChange, as_json: bool) -> None:
    if as_json:
        click.echo(
            json.dumps(
                {
                    "name": change.name,
                    "action": change.action,
                    "before": change.before,
                    "after": change.after,
                    "jobs": change.jobs,
                },
                indent=2,
            )
        )
    else:
        click.echo(change.describe())


@limits.command("set")
@app_option
@name_argument
@click.option(
    "--concurrency",
    default=None,
    help="The most jobs running at once under the limit (a number >= 1, or none).",
)
@click.option(
    "--rate",
    default=None,
    help="The most jobs started per period: 10/s, 100/m, 1000/h, 10/30s, or none.",
)
@json_option
def set_limit(
    app_path: str, name: str, concurrency: str | None, rate: str | None, as_json: bool
) -> None:
    """Change the limit NAME at runtime: queue:<queue>, task:<task> (any task or queue,
    declared with a limit or not) or key:<task> (a declared per-key limit). What is not
    given stays. Stored in the database: every worker of every host obeys from its next
    claim (woken at once); a worker started later keeps it; `limits reset` returns to
    what the app declares. Audited (`limits audit`)."""
    app = load_app(app_path)
    with app:
        change = guard(
            lambda: controls.set_limit(
                app,
                name,
                concurrency=controls.UNSET if concurrency is None else concurrency,
                rate=controls.UNSET if rate is None else rate,
                actor=actor_here("cli"),
            )
        )
    _report(change, as_json)


@limits.command("pause")
@app_option
@name_argument
@json_option
def pause_limit(app_path: str, name: str, as_json: bool) -> None:
    """No job under the limit NAME starts until `limits resume` (running ones finish)."""
    app = load_app(app_path)
    with app:
        change = guard(lambda: controls.pause_limit(app, name, actor=actor_here("cli")))
    _report(change, as_json)


@limits.command("resume")
@app_option
@name_argument
@json_option
def resume_limit(app_path: str, name: str, as_json: bool) -> None:
    """Undo `limits pause`: the concurrency before the pause applies again."""
    app = load_app(app_path)
    with app:
        change = guard(lambda: controls.resume_limit(app, name, actor=actor_here("cli")))
    _report(change, as_json)


@limits.command("reset")
@app_option
@name_argument
@json_option
def reset_limit(app_path: str, name: str, as_json: bool) -> None:
    """Return the limit NAME to what the app declares (a limit it does not declare is
    removed: its jobs run without it)."""
    app = load_app(app_path)
    with app:
        change = guard(lambda: controls.reset_limit(app, name, actor=actor_here("cli")))
    _report(change, as_json)


@limits.command("audit")
@app_option
@click.option("--name", default=None, help="Only the changes of this limit.")
@click.option(
    "--last",
    default=50,
    show_default=True,
    type=click.IntRange(1, 10_000),
    metavar="N",
    help="How many changes, the newest first.",
)
@json_option
def audit(app_path: str, name: str | None, last: int, as_json: bool) -> None:
    """The last changes of limits: when, who, what, the values before and after."""
    app = load_app(app_path)
    with app:
        rows = guard(
            lambda: controls.read_audit(
                app,
                targets=[f"limit:{name}"] if name else None,
                prefix=None if name else "limit:",
                limit=last,
            )
        )
    if as_json:
        click.echo(json.dumps(rows, default=str, indent=2))
        return
    if not rows:
        click.echo("no limit was changed at runtime")
        return
    click.echo(
        format_table(
            ("AT", "ACTOR", "ACTION", "LIMIT", "BEFORE", "AFTER"),
            [
                [
                    row["at"].isoformat(timespec="seconds"),
                    row["actor"],
                    row["action"],
                    row["target"].removeprefix("limit:"),
                    controls.describe_values(row["before"]),
                    controls.describe_values(row["after"]),
                ]
                for row in rows
            ],
        )
    )


@click.group()
def sequences() -> None:
    """Sequences (jobs of one sequence_key run one at a time, in enqueue order)."""


@sequences.command()
@app_option
@store_option
@json_option
@click.argument("key", callback=checked_name("sequence key"))
def release(app_path: str, store: str | None, as_json: bool, key: str) -> None:
    """Release sequence KEY from the failed job holding it: its next job starts (the
    failed job stays failed). Of every store of an app of several, or of --store."""
    app = load_app(app_path)
    with app:
        results = each_store(app, lambda one: release_sequence(one, key), store)

    def text(started: int | None) -> str:
        if started is None:
            return f"sequence {key}: released; no job started (none waits, or one runs)"
        return f"sequence {key}: released; job {started} started"

    echo_each(
        app,
        results,
        as_json=as_json,
        document=lambda started: {"sequence": key, "started": started},
        text=text,
    )
