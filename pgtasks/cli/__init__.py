"""The ``pgtasks`` command line: a thin shell over the public classes.

Each command group lives in a module of its own and is registered here; the modules
import only ``_common``, never this package, so registration has no import cycle.
"""

from __future__ import annotations

import click

from ._common import install_global_options, root_options
from .beat import beat, schedules
from .celery_ops import control, inspect, result
from .doctor import doctor
from .durable import events, fork_command
from .embedded import embedded
from .job_actions import edit_command, run_now_command, snooze_command
from .limits import limits, sequences
from .operations import jobs, prune_command, stats, workers
from .queues import queues
from .schema import migrate
from .tasks import call, purge, tasks
from .web import web
from .worker import worker
from .workflows import workflows


@click.group()
@click.version_option(package_name="pgtasks")
@root_options
def main(app_path: str | None, log_level: str, log_format: str) -> None:
    """pgtasks: background tasks on PostgreSQL.

    The global options -A, -l and --log-format go before the command (pgtasks -A
    myproj.tasks:app worker) or after it (pgtasks worker -A myproj.tasks:app); after it
    wins. Every command takes --help.
    """


for command in (
    migrate,
    worker,
    beat,
    schedules,
    call,
    tasks,
    purge,
    embedded,
    stats,
    jobs,
    queues,
    limits,
    sequences,
    workers,
    prune_command,
    doctor,
    web,
    workflows,
    inspect,
    control,
    result,
    events,
):
    main.add_command(command)
for command in (fork_command, run_now_command, snooze_command, edit_command):
    jobs.add_command(command)

install_global_options(main)
