"""The commands of an app of several stores: each store asked concurrently, the answers
labelled by store, a store that cannot answer shown as its own error (the others still
answer; the command then exits 1). ``--store NAME`` asks that store only (the answer
still labelled). An app of one store prints what it always printed."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .._errors import PgTasksError
from .._operations import to_json
from ._common import guard

if TYPE_CHECKING:
    from .._app.app import App

T = TypeVar("T")

store_option = click.option(
    "--store",
    "store",
    default=None,
    metavar="NAME",
    help="Only this store, of an app of several [default: every store].",
)


def each_store(
    app: App, operation: Callable[[App], T], store: str | None = None
) -> dict[str, T | BaseException]:
    """``operation`` on the App of each store (concurrently), by store name, or of
    ``store`` only (a name the app does not have: one line and exit 1); an app of one
    store runs it as before (an error is one line and exit 1)."""
    if store is not None:
        guard(lambda: app.store_router.layout.check_store(store))
    if app.store_router.single:
        return {app.store_name: guard(lambda: operation(app))}
    names = None if store is None else [store]
    return app.store_router.each(lambda name: operation(app.for_store(name)), names)


def echo_each(
    app: App,
    results: dict[str, T | BaseException],
    *,
    as_json: bool,
    document: Callable[[T], Any],
    text: Callable[[T], str],
) -> None:
    """Print each store's answer (``document`` for --json, else ``text``); exit 1 after
    printing them all when a store failed."""
    if app.store_router.single:
        (value,) = results.values()
        if isinstance(value, BaseException):  # (guard exits on a pgtasks error instead)
            raise value
        click.echo(to_json(document(value)) if as_json else text(value))
        return
    failed = [name for name, value in results.items() if isinstance(value, BaseException)]
    if as_json:
        click.echo(
            to_json(
                {
                    "stores": {
                        name: {"error": describe_error(value)}
                        if isinstance(value, BaseException)
                        else document(value)
                        for name, value in results.items()
                    }
                }
            )
        )
    else:
        for name, value in results.items():
            click.echo(f"== store {name} ({store_label(app, name)})")
            if isinstance(value, BaseException):
                click.echo(f"error: {describe_error(value)}")
            else:
                click.echo(text(value))
    if failed:
        click.echo(f"error: store(s) {', '.join(failed)} did not answer", err=True)
        sys.exit(1)


def store_label(app: App, name: str) -> str:
    database = app.store_router.databases[name]
    return f"schema {database.queries.schema!r} on {database.describe()}"


def describe_error(error: BaseException) -> str:
    if isinstance(error, PgTasksError):
        return str(error)
    return f"{type(error).__name__}: {str(error).strip()}"
