"""``pgtasks migrate``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from .._store.migrator import DEFAULT_LOCK_RETRY_FOR, DEFAULT_LOCK_TIMEOUT

if TYPE_CHECKING:
    from .._app.app import App
from ._common import (
    app_option,
    configure_logging,
    guard,
    json_option,
    load_app,
    log_format_option,
    log_level_option,
    seconds_option,
)


@click.command()
@app_option
@click.option(
    "--plan",
    is_flag=True,
    help="Print what would run (each pending step, its statements and the locks they take)"
    " and change nothing.",
)
@seconds_option(
    "--lock-timeout",
    default=DEFAULT_LOCK_TIMEOUT,
    minimum=0.001,
    help="Longest wait of a catalog change for its lock: past it the step rolls back and is"
    " tried again, so enqueues and claims never queue behind it for longer.",
)
@seconds_option(
    "--lock-retry-for",
    default=DEFAULT_LOCK_RETRY_FOR,
    help="How long a step whose lock is not granted is retried before migrate fails"
    " (naming the sessions that held it; the steps done are kept).",
)
@json_option
@log_level_option
@log_format_option
def migrate(
    app_path: str,
    plan: bool,
    lock_timeout: float,
    lock_retry_for: float,
    as_json: bool,
    log_level: str,
    log_format: str,
) -> None:
    """Create or upgrade the pgtasks schema online (safe to run concurrently and repeatedly).

    On a live database nothing waits on it for long: indexes are built concurrently,
    catalog changes wait at most --lock-timeout for their locks and are retried, large
    backfills run in batches. It connects to the session DSN (App(session_dsn=...) /
    PGTASKS_SESSION_DSN when the app's dsn is a transaction pooler).
    """
    configure_logging(log_level, log_format)
    app = load_app(app_path)
    options = {"lock_timeout": lock_timeout, "lock_retry_for": lock_retry_for}
    with app:
        if plan:
            planned = guard(lambda: app.migration_plan(**options))
            click.echo(json.dumps(planned.as_json()) if as_json else planned.describe())
            return
        applied = guard(lambda: app.migrate(**options))
        numbers = _store_numbers(app)
    names = [f"{m.version:04d}_{m.name}" for m in applied]
    if as_json:
        click.echo(json.dumps({"schema": app.schema, "applied": names, **numbers}))
    elif applied:
        click.echo(f"schema {app.schema!r} migrated: applied {', '.join(names)}")
    else:
        click.echo(f"schema {app.schema!r} is up to date")
    for name, number in numbers.get("stores", {}).items():
        schema = app.store_router.databases[name].queries.schema
        click.echo(f"store {name} (schema {schema!r}): number {number}")


def _store_numbers(app: App) -> dict[str, dict[str, int]]:
    """The stores' numbers after migrate, of an app of several (nothing otherwise)."""
    if app.store_router.single:
        return {}
    numbers = {}
    for name, identity in guard(app.store_router.identities).items():
        if isinstance(identity, BaseException):
            raise click.ClickException(f"store {name}: {identity}")
        numbers[name] = identity.number
    return {"stores": numbers}
