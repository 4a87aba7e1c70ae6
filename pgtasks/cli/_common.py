"""Helpers shared by the command modules: loading the app, common options, one-line errors."""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from .._errors import ConfigurationError, PgTasksError
from .._payload import check_name

if TYPE_CHECKING:
    from .._app.app import App

F = TypeVar("F", bound=Callable[..., Any])

APP_HELP = "The app as module:attribute (or PGTASKS_APP), e.g. myproj.tasks:app."
JSON_HELP = "Print one JSON document instead of text."
LOG_LEVEL_HELP = "Logging level."
LOG_FORMAT_HELP = "json: one JSON object per line (time, level, logger, message, job_id, task, …)."
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

#: The global options: accepted before the command (``pgtasks -A app worker``, as Celery
#: does) and after it (``pgtasks worker -A app``); given in both places, the one after the
#: command wins. Their ``param.name``s.
GLOBAL_OPTIONS = ("app_path", "log_level", "log_format")
#: Where the log options' values are kept for a command that does not take them itself.
_LOGGING_META = "pgtasks.logging"


def load_app(path: str) -> App:
    """The App ``-A`` names; a usage error (exit 2) when it names none."""
    from .._app import loading

    try:
        return loading.load_app(path)
    except ConfigurationError as error:
        raise click.UsageError(str(error)) from None


def configure_logging(level: str, log_format: str = "text") -> None:
    from .._logging import configure_logging as configure

    configure(level, log_format, sys.stderr)


def _given(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE


def resolve_global(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A global option's value: given after the command, else given before it, else its
    environment variable or default."""
    name = param.name or ""
    if _given(ctx, name):
        return value
    root = ctx.find_root()
    if root is not ctx and name in root.params and _given(root, name):
        return root.params[name]
    return value


class _AppOption(click.Option):
    """``-A``; ``needed``: a missing app (after the global option and PGTASKS_APP are
    taken into account) is a usage error."""

    def __init__(self, *args: Any, needed: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.needed = needed


def _resolve_app(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    value = resolve_global(ctx, param, value)
    if value is None and isinstance(param, _AppOption) and param.needed:
        raise click.MissingParameter(ctx=ctx, param=param)
    return value


_APP_DECLS = ("-A", "--app", "app_path")

#: ``-A``: the App of every command that reads or writes the database. Given on
#: ``pgtasks`` (before the command) it serves every command; a missing one is a usage error.
app_option = click.option(
    *_APP_DECLS,
    cls=_AppOption,
    envvar="PGTASKS_APP",
    metavar="MODULE:APP",
    callback=_resolve_app,
    help=APP_HELP,
)
#: ``-A`` for commands that use an app when given one (``pgtasks embedded``).
optional_app_option = click.option(
    *_APP_DECLS,
    cls=_AppOption,
    needed=False,
    envvar="PGTASKS_APP",
    metavar="MODULE:APP",
    callback=_resolve_app,
    help=APP_HELP,
)


def _log_level_spec() -> tuple[list[str], dict[str, Any]]:
    return ["-l", "--loglevel", "--log-level", "log_level"], {
        "default": "info",
        "show_default": True,
        "type": click.Choice(LOG_LEVELS, case_sensitive=False),
        "help": LOG_LEVEL_HELP,
    }


def _log_format_spec() -> tuple[list[str], dict[str, Any]]:
    return ["--log-format", "log_format"], {
        "default": "text",
        "show_default": True,
        "type": click.Choice(["text", "json"]),
        "help": LOG_FORMAT_HELP,
    }


#: ``-l/--loglevel/--log-level`` and ``--log-format`` of commands that log (worker, beat,
#: migrate, web); every other command takes them too (see install_global_options).
log_level_option = click.option(
    *_log_level_spec()[0], callback=resolve_global, **_log_level_spec()[1]
)
log_format_option = click.option(
    *_log_format_spec()[0], callback=resolve_global, **_log_format_spec()[1]
)
json_option = click.option("--json", "as_json", is_flag=True, help=JSON_HELP)


def seconds_option(
    *decls: str,
    help: str,
    default: float | None = None,
    minimum: float = 0,
    positive: bool = False,
) -> Callable[[F], F]:
    """An option of a number of seconds >= ``minimum`` (> 0 when ``positive``); its
    default shown when it has one (None: the app's or the store's value)."""
    return click.option(
        *decls,
        type=click.FloatRange(min=minimum, min_open=positive),
        default=default,
        show_default=default is not None,
        metavar="SECONDS",
        help=help,
    )


def checked_name(what: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """An option or argument callback: a queue or task name (``what``) must be a name
    pgtasks accepts; None (not given) stays None."""

    def convert(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return check_name(what, value)
        except ValueError as error:
            raise click.BadParameter(str(error)) from None

    return convert


def root_options(group: F) -> F:
    """The global options on the ``pgtasks`` group itself (before the command)."""
    for decls, attrs in (_log_format_spec(), _log_level_spec()):
        group = click.option(*decls, **attrs)(group)
    return click.option(*_APP_DECLS, envvar="PGTASKS_APP", metavar="MODULE:APP", help=APP_HELP)(
        group
    )


def _store_logging(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    value = resolve_global(ctx, param, value)
    root = ctx.find_root()
    explicit = _given(ctx, param.name or "") or (root is not ctx and _given(root, param.name or ""))
    settings = ctx.meta.setdefault(_LOGGING_META, {"explicit": False})
    settings[param.name] = value
    settings["explicit"] = settings["explicit"] or explicit
    return value


def _configure_then(callback: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        settings = click.get_current_context().meta.get(_LOGGING_META)
        if settings is not None and settings["explicit"]:
            configure_logging(settings.get("log_level", "info"), settings.get("log_format", "text"))
        return callback(*args, **kwargs)

    return run


def install_global_options(group: click.Command) -> None:
    """Let ``group`` (a command, or every command under a group) take the log options
    after its name.

    A command that declares them (worker, beat, migrate, web) configures logging itself;
    any other gets them with their values kept aside, and logging is configured before
    it runs when either was given (before or after the command). Runs once per command,
    when ``pgtasks`` loads it.
    """
    commands = _leaf_commands(group) if isinstance(group, click.Group) else [group]
    for command in commands:
        names = {param.name for param in command.params}
        if "log_level" in names and "log_format" in names:
            continue
        taken = {opt for param in command.params for opt in param.opts}
        for decls, attrs in (_log_level_spec(), _log_format_spec()):
            name = decls[-1]
            opts = [decl for decl in decls[:-1] if decl not in taken]
            if name not in names and opts:
                command.params.append(
                    click.Option(
                        [*opts, name], callback=_store_logging, expose_value=False, **attrs
                    )
                )
        if command.callback is not None:
            command.callback = _configure_then(command.callback)


def _leaf_commands(group: click.Group) -> list[click.Command]:
    found: list[click.Command] = []
    for command in group.commands.values():
        if isinstance(command, click.Group):
            found += _leaf_commands(command)
        else:
            found.append(command)
    return found


def guard(function: Any) -> Any:
    """Run ``function``; a pgtasks error becomes a one-line message and exit code 1."""
    try:
        return function()
    except PgTasksError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)


def exit_now(code: int) -> None:
    """Flush logs and output, then end the process at once (threads may linger)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
