"""The commands' help: one wording and one default for every shared option, readable
metavars, global options on every command (no database; click's own rendering)."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from pgtasks.cli import main
from pgtasks.cli._common import GLOBAL_OPTIONS

#: Options that mean the same on every command that takes them.
SHARED = (*GLOBAL_OPTIONS, "as_json")


def leaf_commands() -> Iterator[tuple[str, click.Command, click.Context]]:
    def walk(
        command: click.Command, ctx: click.Context
    ) -> Iterator[tuple[str, click.Command, click.Context]]:
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                child = command.get_command(ctx, name)
                assert child is not None
                yield from walk(child, click.Context(child, info_name=name, parent=ctx))
        else:
            yield ctx.command_path, command, ctx

    yield from walk(main, click.Context(main, info_name="pgtasks"))


def test_a_shared_option_reads_the_same_on_every_command() -> None:
    seen: dict[str, dict[tuple[str, str], list[str]]] = {name: {} for name in SHARED}
    root = click.Context(main, info_name="pgtasks")
    for param in main.params:
        if param.name in SHARED:
            record = param.get_help_record(root)
            assert record is not None
            seen[param.name].setdefault(record, []).append("pgtasks")
    for path, command, ctx in leaf_commands():
        for param in command.params:
            if param.name in SHARED:
                record = param.get_help_record(ctx)
                assert record is not None
                seen[param.name].setdefault(record, []).append(path)

    for name, variants in seen.items():
        assert len(variants) == 1, f"{name} is described in {len(variants)} ways: {variants}"
    assert len(next(iter(seen["as_json"].values()))) > 15


def test_every_command_takes_the_log_options_and_each_database_command_the_app() -> None:
    without_app = {
        "pgtasks embedded start",
        "pgtasks embedded status",
        "pgtasks embedded stop",
    }
    for path, command, _ in leaf_commands():
        options = {opt for param in command.params for opt in param.opts}
        assert {"-l", "--loglevel", "--log-level", "--log-format"} <= options, path
        if path not in without_app:
            app = next(param for param in command.params if param.name == "app_path")
            assert getattr(app, "needed", True), path
        assert "-A" in options, path


def test_numbers_show_what_they_count_not_click_type_names() -> None:
    for path, command, ctx in leaf_commands():
        for param in command.params:
            record = param.get_help_record(ctx)
            if record is not None:
                assert "RANGE" not in record[0], f"{path} {record[0]}: give it a metavar"


def test_jobs_retry_help_states_its_rule_before_the_options() -> None:
    result = CliRunner().invoke(main, ["jobs", "retry", "--help"])

    assert result.exit_code == 0
    text = result.output
    assert text.index("max_attempts = max(max_attempts, attempts + 1)") < text.index("Options:")


@pytest.mark.parametrize("command", ["worker", "beat", "migrate", "web"])
def test_commands_that_log_take_celery_s_log_level_flags(command: str) -> None:
    result = CliRunner().invoke(main, [command, "--help"])

    assert result.exit_code == 0
    assert "-l, --loglevel, --log-level [debug|info|warning|error|critical]" in result.output
    assert "[default: info]" in " ".join(result.output.split())


def test_the_worker_takes_celery_s_short_flags() -> None:
    options = {opt for param in main.commands["worker"].params for opt in param.opts}

    assert {"-A", "-Q", "-c", "-l", "-B"} <= options
