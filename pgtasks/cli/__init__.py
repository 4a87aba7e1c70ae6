"""The ``pgtasks`` command line: a thin shell over the public classes.

Each command group lives in a module of its own, imported when that command runs or
shows its help (``pgtasks --help`` imports none: :data:`COMMANDS` holds what its listing
needs). The modules import only ``_common``, never this package, so loading has no
import cycle.
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple

import click

from ._common import install_global_options, root_options


class Lazy(NamedTuple):
    """Where a command is defined, and the first paragraph of its help (whitespace
    collapsed) that ``pgtasks --help`` lists, as click would shorten the command's own."""

    module: str
    attribute: str
    summary: str


#: Every ``pgtasks`` command. tests/unit/test_cli_lazy.py checks each summary against the
#: command's help and every ``--help`` against the commands loaded at once.
COMMANDS = {
    "beat": Lazy(
        ".beat",
        "beat",
        "Enqueue periodic jobs until SIGTERM/SIGINT (run several: one is active at a time).",
    ),
    "call": Lazy(
        ".tasks", "call", "Enqueue a job of TASK (a registered task's name) and print its id."
    ),
    "control": Lazy(
        ".celery_ops",
        "control",
        "Celery's remote control: revoke, rate limits, consumers (queue pause/resume), pool sizes.",
    ),
    "doctor": Lazy(
        ".doctor",
        "doctor",
        "Check what slows or endangers the queue: xmin horizon (old transactions, replication"
        " slots, prepared transactions), dead tuples and vacuum, index bloat, jobs stuck under"
        " dead workers, backlog age, connections. Exit 0 healthy, 1 warnings, 2 critical.",
    ),
    "embedded": Lazy(
        ".embedded",
        "embedded",
        "The embedded development PostgreSQL (./.pgtasks): start, status, stop, dsn.",
    ),
    "events": Lazy(".durable", "events", "Emit events that jobs wait for (ctx.wait_for_event)."),
    "inspect": Lazy(
        ".celery_ops",
        "inspect",
        "Celery's inspect views, read from the database (every live worker answers).",
    ),
    "jobs": Lazy(".operations", "jobs", "List, show, retry, cancel and delete jobs."),
    "limits": Lazy(
        ".limits",
        "limits",
        "Every stored limit: concurrency, rate, tokens left, running, pending and held-back"
        " jobs; then the busiest keys of per-key limits, the busiest and starved fair keys, and"
        " the sequences (head, length, held by a failed job). Its commands change a limit at"
        " runtime (set, pause, resume, reset) and list the changes (audit).",
    ),
    "migrate": Lazy(
        ".schema",
        "migrate",
        "Create or upgrade the pgtasks schema online (safe to run concurrently and repeatedly).",
    ),
    "prune": Lazy(
        ".operations",
        "prune_command",
        "Delete finished jobs past their retention, in batches; never pending or running jobs.",
    ),
    "purge": Lazy(
        ".tasks",
        "purge",
        "Delete pending jobs (all, or of a queue or a task) after a confirmation.",
    ),
    "queues": Lazy(
        ".queues",
        "queues",
        "List, pause and resume queues (shared by every worker of the schema).",
    ),
    "result": Lazy(".celery_ops", "result", "A task's result by id (its state while it has none)."),
    "schedules": Lazy(
        ".beat",
        "schedules",
        "List schedules: next run (in their zone and UTC) and last enqueued tick.",
    ),
    "sequences": Lazy(
        ".limits",
        "sequences",
        "Sequences (jobs of one sequence_key run one at a time, in enqueue order).",
    ),
    "stats": Lazy(
        ".operations",
        "stats",
        "Jobs per queue and status, oldest due job's wait, recent throughput, live workers.",
    ),
    "tasks": Lazy(".tasks", "tasks", "The app's registered tasks."),
    "web": Lazy(
        ".web",
        "web",
        "Serve the dashboard: queues, jobs (retry, cancel, delete), workers, schedules.",
    ),
    "worker": Lazy(
        ".worker",
        "worker",
        "Claim and run jobs until SIGTERM/SIGINT (a second signal releases running jobs now).",
    ),
    "workers": Lazy(
        ".operations",
        "workers",
        "Live workers and recently stopped or lost ones, with heartbeat age and running jobs,"
        " then what runs where: each running job's worker, host, task, attempt, runtime and"
        " arguments (cut at 200 characters, escaped).",
    ),
    "workflows": Lazy(
        ".workflows",
        "workflows",
        "List, show, cancel and heal workflows (chains, groups and chords of jobs).",
    ),
}
#: Commands defined elsewhere that join a group of :data:`COMMANDS` when it loads.
SUBCOMMANDS = {
    "jobs": (
        (".durable", "fork_command"),
        (".job_actions", "run_now_command"),
        (".job_actions", "snooze_command"),
        (".job_actions", "edit_command"),
    ),
}


def _attribute(module: str, attribute: str) -> Any:
    return getattr(importlib.import_module(module, __name__), attribute)


def load_command(name: str) -> click.Command:
    """The command ``name`` of :data:`COMMANDS`, its module imported now, with its
    subcommands and the global options installed (once per process: the command objects
    are module attributes)."""
    lazy = COMMANDS[name]
    command: click.Command = _attribute(lazy.module, lazy.attribute)
    if not getattr(command, "_pgtasks_loaded", False):
        if isinstance(command, click.Group):
            for module, attribute in SUBCOMMANDS.get(name, ()):
                command.add_command(_attribute(module, attribute))
        install_global_options(command)
        command._pgtasks_loaded = True  # type: ignore[attr-defined]
    return command


class _Commands(dict[str, click.Command]):
    """``main.commands``: a command is looked up by name and loaded on first use."""

    def __missing__(self, name: str) -> click.Command:
        if name not in COMMANDS:
            raise KeyError(name)
        command = self[name] = load_command(name)
        return command


class LazyGroup(click.Group):
    """The ``pgtasks`` group: it imports a command's module only when that command is
    looked up; its own help lists the commands not loaded yet from :data:`COMMANDS`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _Commands(self.commands)
        self._listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name not in COMMANDS:
            return None
        if self._listing:
            return click.Command(cmd_name, help=COMMANDS[cmd_name].summary)
        return self.commands[cmd_name]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            self._listing = False


@click.group(cls=LazyGroup)
@click.version_option(package_name="pgtasks")
@root_options
def main(app_path: str | None, log_level: str, log_format: str) -> None:
    """pgtasks: background tasks on PostgreSQL.

    The global options -A, -l and --log-format go before the command (pgtasks -A
    myproj.tasks:app worker) or after it (pgtasks worker -A myproj.tasks:app); after it
    wins. Every command takes --help.
    """
