"""``manage.py pgtasks_worker``: ``pgtasks worker`` on the project's App.

Runs Django tasks of every ``PgTasksBackend`` and the project's own pgtasks tasks; every
``pgtasks worker`` option applies (``manage.py pgtasks_worker --help``).
"""

from __future__ import annotations

from pgtasks.cli.worker import worker

from ._click import ClickCommand


class Command(ClickCommand):
    help = "Run a pgtasks worker for this project (the options of `pgtasks worker`)."
    click_command = worker
