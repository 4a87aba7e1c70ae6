"""``pgtasks worker`` flags that choose and size executors (see docs/howto/executors.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .._errors import ConfigurationError

if TYPE_CHECKING:
    from .._app.app import App

F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS = [
    click.option(
        "--pool",
        "pool",
        type=click.Choice(["thread", "process"]),
        default="thread",
        show_default=True,
        help="Executor of sync tasks that name none (async def tasks use the event loop).",
    ),
    click.option(
        "--processes",
        type=click.IntRange(min=1),
        default=None,
        metavar="N",
        help="Size of the process pool [default: number of CPUs].",
    ),
    click.option(
        "--queue-executor",
        "queue_executor",
        multiple=True,
        metavar="QUEUE=thread|process",
        help="Default executor of a queue's sync tasks (repeatable), e.g. cpu=process.",
    ),
    click.option(
        "--process-start-method",
        type=click.Choice(["spawn", "fork"]),
        default="spawn",
        show_default=True,
        help="How pool children start: spawn imports -A afresh; fork copies this process.",
    ),
    click.option(
        "--max-tasks-per-child",
        type=click.IntRange(min=1),
        default=None,
        metavar="N",
        help="Replace a pool child after this many jobs.",
    ),
    click.option(
        "--max-memory-per-child",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        metavar="MB",
        help="Replace a pool child whose resident memory after a job exceeds this.",
    ),
    click.option(
        "--loop-lag-threshold",
        type=click.FloatRange(min=0),
        default=0.5,
        show_default=True,
        metavar="SECONDS",
        help="Warn when the event loop is blocked this many seconds (0: off).",
    ),
    click.option(
        "--job-logs/--no-job-logs",
        default=True,
        show_default=True,
        help="Capture the log lines each attempt writes and store them with the job.",
    ),
    click.option(
        "--job-logs-level",
        type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
        default="info",
        show_default=True,
        help="The lowest level of the lines captured, whatever --loglevel prints.",
    ),
]


def executor_options(command: F) -> F:
    """Decorate the worker command with the executor flags."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def parse_queue_executors(values: tuple[str, ...]) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for value in values:
        queue_name, separator, executor = value.partition("=")
        if not separator or not queue_name.strip() or executor not in ("thread", "process"):
            raise click.BadParameter(
                f"{value!r}: expected QUEUE=thread or QUEUE=process", param_hint="--queue-executor"
            )
        mapping[queue_name.strip()] = executor
    return mapping


def child_app_path(app_path: str, app: App) -> str:
    """``-A`` as ``module:attribute`` (``-A module`` found ``app``, ``application``, a
    Celery-shaped app, …): what spawned children import."""
    if ":" in app_path:
        return app_path
    from .._app import loading

    try:
        return loading.find_app(app_path)[1]
    except ConfigurationError:
        return f"{app_path}:app"


def worker_executor_options(app_path: str, app: App, flags: dict[str, Any]) -> dict[str, Any]:
    """``Worker(...)`` keyword arguments from the flags; spawned children import ``-A``."""
    return {
        "pool": flags["pool"],
        "processes": flags["processes"],
        "queue_executors": parse_queue_executors(flags["queue_executor"]),
        "process_start_method": flags["process_start_method"],
        "app_path": child_app_path(app_path, app),
        "max_tasks_per_child": flags["max_tasks_per_child"],
        "max_memory_per_child": flags["max_memory_per_child"],
        "loop_lag_threshold": flags["loop_lag_threshold"] or None,
        "job_logs": flags["job_logs_level"].upper() if flags["job_logs"] else False,
    }
