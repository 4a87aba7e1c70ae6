"""The lazily loaded command line prints what the commands loaded at once print.

``pgtasks`` imports a command's module when that command runs or shows its help and
lists the others from ``pgtasks.cli.COMMANDS``; every ``--help`` stays byte-identical to
the one of the commands loaded together (no database; one process per side)."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner

from pgtasks.cli import COMMANDS, load_command, main
from tests.support.environment import ROOT

#: Renders ``pgtasks [PATH] --help`` for every command path at several widths and prints
#: them as JSON: lazily (each command loaded when first named) or with every command
#: loaded first (as the command line did before it loaded lazily).
RENDER = """
import json, sys
import click
from click.testing import CliRunner
from click.testing import CliRunner
from pgtasks.cli import COMMANDS, load_command, main

if sys.argv[1] == "eager":
    for name in COMMANDS:
        main.commands[name] = load_command(name)

def render(path, width):
    result = CliRunner().invoke(
        main, [*path, "--help"], terminal_width=width, max_content_width=width
    )
    assert result.exit_code == 0, (path, result.output)
    return result.output

out = {}
for width in (50, 80, 200):
    out[f"pgtasks --help {width}"] = render([], width)
paths = [[name] for name in sorted(COMMANDS)]
while paths:
    path = paths.pop(0)
    command = main
    for part in path:
        command = command.get_command(click.Context(command), part)
    if isinstance(command, click.Group):
        paths += [[*path, name] for name in command.list_commands(click.Context(command))]
    for width in (50, 80, 200):
        out[" ".join(["pgtasks", *path, "--help", str(width)])] = render(path, width)
print(json.dumps(out))
"""


def rendered(mode: str) -> dict[str, str]:
    result = subprocess.run(
        [sys.executable, "-c", RENDER, mode],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    texts: dict[str, str] = json.loads(result.stdout)
    return texts


def test_every_help_is_the_same_loaded_lazily_or_at_once() -> None:
    lazy, eager = rendered("lazy"), rendered("eager")

    assert sorted(lazy) == sorted(eager)
    assert len(lazy) > 150
    for key in eager:
        assert lazy[key] == eager[key], key


def test_each_summary_is_the_first_paragraph_of_its_command_s_help() -> None:
    for name, lazy in COMMANDS.items():
        command = load_command(name)
        first = " ".join((command.help or "").partition("\n\n")[0].split())
        assert (command.short_help, command.hidden, command.deprecated) == (None, False, False)
        assert lazy.summary == first, f"pgtasks.cli.COMMANDS[{name!r}].summary: {first!r}"


def test_an_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["no-such-command"])

    assert result.exit_code == 2
    assert "No such command 'no-such-command'" in result.output
