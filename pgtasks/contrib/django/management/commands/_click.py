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
            parser.add_argument(*names, **self._argparse_options(option))

    @staticmethod
    def _argparse_options(option: click.Option) -> dict[str, Any]:
        """argparse's view of a click option: the same help text, default and metavar as
        ``pgtasks COMMAND --help`` shows."""
        description = option.help or ""
        default = option.show_default if isinstance(option.show_default, str) else option.default
        if option.show_default and default is not None and not option.is_flag:
            description = f"{description} [default: {default}]".strip()
        if option.is_flag:
            return {
                "dest": option.name,
                "action": "store_true",
                "default": None,
                "help": description,
            }
        choices = option.type.choices if isinstance(option.type, click.Choice) else None
        return {
            "dest": option.name,
            "action": "append" if option.multiple else "store",
            "choices": list(choices) if choices is not None else None,
            # An option without a metavar of its own shows its type's plain name (TEXT,
            # INTEGER), never click's "INTEGER RANGE".
            "metavar": option.metavar or (None if choices else _type_name(option.type)),
            "default": None,
            "help": description,
        }

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


def _type_name(kind: click.ParamType[Any]) -> str:
    if isinstance(kind, click.types.IntParamType):
        return "INTEGER"
    if isinstance(kind, click.types.FloatParamType):
        return "FLOAT"
    return kind.name.upper()
