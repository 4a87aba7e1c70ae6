"""``pgtasks doctor``: registered on the ``pgtasks`` command group by cli.py."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from .._app.doctor import diagnose, exit_code
from ._common import app_option, json_option, load_app
from ._stores import describe_error, each_store, store_option

if TYPE_CHECKING:
    from .._app.app import App

_MARKS = {"ok": "ok      ", "warning": "WARNING ", "critical": "CRITICAL"}


@click.command()
@app_option
@store_option
@json_option
def doctor(app_path: str, store: str | None, as_json: bool) -> None:
    """Check what slows or endangers the queue: xmin horizon (old transactions, replication
    slots, prepared transactions), dead tuples and vacuum, index bloat, jobs stuck under
    dead workers, backlog age, connections. Exit 0 healthy, 1 warnings, 2 critical."""
    app = load_app(app_path)

    def run(owner: App) -> list[dict[str, str]]:
        with owner.connection() as conn:
            return [finding.as_dict() for finding in diagnose(owner, conn)]

    results = each_store(app, run, store)
    app.close()
    levels = ("ok", "warning", "critical")
    code = 0
    for value in results.values():
        if isinstance(value, BaseException):
            code = 2  # a store that cannot be reached is critical
        else:
            code = max([code, *(levels.index(f["level"]) for f in value)])
    if as_json:
        if app.store_router.single:
            (findings,) = results.values()
            click.echo(json.dumps({"status": levels[code], "findings": findings}))
        else:
            stores = {
                name: {"error": describe_error(value)}
                if isinstance(value, BaseException)
                else {"findings": value}
                for name, value in results.items()
            }
            click.echo(json.dumps({"status": levels[code], "stores": stores}))
    else:
        for name, value in results.items():
            owner = app.for_store(name)
            store = "" if app.store_router.single else f"store {name}: "
            click.echo(
                f"pgtasks doctor: {store}schema {owner.schema!r} on {owner.describe_database()}"
            )
            if isinstance(value, BaseException):
                click.echo(f"{_MARKS['critical']} store: {describe_error(value)}")
                continue
            for finding in value:
                click.echo(f"{_MARKS[finding['level']]} {finding['check']}: {finding['summary']}")
                if finding["remedy"]:
                    click.echo(f"         → {finding['remedy']}")
    sys.exit(code)


__all__ = ["doctor", "exit_code"]
