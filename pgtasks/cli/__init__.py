"""The ``pgtasks`` command line: a thin shell over the public classes.

Each command group lives in a module of its own and is registered here; the modules
import only ``_common``, never this package, so registration has no import cycle.
"""

from __future__ import annotations

import click

from .beat import beat, schedules
from .doctor import doctor
from .embedded import embedded
from .limits import limits
from .operations import jobs, prune_command, stats, workers
from .queues import queues
from .schema import migrate
from .web import web
from .worker import worker
from .workflows import workflows


@click.group()
@click.version_option(package_name="pgtasks")
def main() -> None:
    """pgtasks: background tasks on PostgreSQL."""


for command in (
    migrate,
    worker,
    beat,
    schedules,
    embedded,
    stats,
    jobs,
    queues,
    limits,
    workers,
    prune_command,
    doctor,
    web,
    workflows,
):
    main.add_command(command)
