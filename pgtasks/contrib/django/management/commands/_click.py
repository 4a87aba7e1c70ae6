"""Management commands that run a ``pgtasks`` click command on the project's App.

The options are those of the click command (``pgtasks worker``, ``pgtasks beat``), read
from its definition: argparse accepts them as text and click parses them, so the two
command lines behave the same.
"""

from __future__ import annotations

import argparse
from typing import Any

import click
from django.core.management.base import BaseCommand

#: ``-A`` of the wrapped command: the App of settings.PGTASKS (see worker.py).
APP_PATH = "pgtasks.contrib.django.worker:app"


class ClickCommand(BaseCommand):  # type: ignore[misc]
    """A management command whose options are a click command's (all but ``-A``)."""

    click_command: click.Command

    def _options(self) -> list[click.Option]:
        return [
            param
            for param in self.click_command.params
            if isinstance(param, click.Option) and param.name != "app_path"
        ]

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        for option in self._options():
            names = [*option.opts, *option.secondary_opts]
            description = option.help or ""
            if option.show_default and option.default is not None and not option.is_flag:
                description = f"{description} [default: {option.default}]".strip()
            if option.is_flag:
                parser.add_argument(
                    *names, dest=option.name, action="store_true", default=None, help=description
                )
                continue
            choices = option.type.choices if isinstance(option.type, click.Choice) else None
            parser.add_argument(
                *names,
                dest=option.name,
                action="append" if option.multiple else "store",
                choices=list(choices) if choices is not None else None,
                metavar=option.metavar or (None if choices else option.type.name.upper()),
                default=None,
                help=description,
            )

    def click_arguments(self, options: dict[str, Any]) -> list[str]:
        arguments = ["-A", APP_PATH]
        for option in self._options():
            value = options.get(option.name or "")
            if value is None:
                continue
            if option.is_flag:
                if value:
                    arguments.append(option.opts[0])
            elif option.multiple:
                for item in value:
                    arguments += [option.opts[-1], str(item)]
            else:
                arguments += [option.opts[-1], str(value)]
        return arguments

    def handle(self, *args: Any, **options: Any) -> None:
        self.click_command.main(
            args=self.click_arguments(options),
            prog_name=f"manage.py {self.click_command.name}",
            standalone_mode=True,
        )
