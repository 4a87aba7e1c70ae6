"""``manage.py pgtasks_beat``: ``pgtasks beat`` on the project's App (periodic jobs)."""

from __future__ import annotations

from pgtasks.cli.beat import beat

from ._click import ClickCommand


class Command(ClickCommand):
    help = "Enqueue this project's periodic pgtasks jobs (the options of `pgtasks beat`)."
    click_command = beat
