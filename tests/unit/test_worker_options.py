"""The worker's options, declared once (WorkerOptions): Worker(app, ...), WorkerSettings
and ``pgtasks worker`` take the same names, and what they make of them did not change
(snapshots taken before the declaration; no database is contacted)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import re

import pytest
from click.testing import CliRunner

from pgtasks import App, Worker
from pgtasks._execution.settings import ExecutorSettings
from pgtasks._worker.settings import (
    APP_INTERVALS,
    EXECUTOR_OPTIONS,
    Setting,
    WorkerOptions,
    WorkerSettings,
    option_default,
)
from pgtasks.cli import main
from pgtasks.cli.executors import worker_executor_options
from tests.support.worker_keywords import CALLS, DSN, SNAPSHOT, outcomes

#: The command's module (``pgtasks.cli.worker`` is the command itself once registered).
worker_command = importlib.import_module("pgtasks.cli.worker")
HELP = SNAPSHOT.parent / "worker_help.txt"
OPTIONS = set(WorkerOptions.__optional_keys__)


def test_pgtasks_worker_help_is_byte_identical_to_its_snapshot() -> None:
    result = CliRunner().invoke(main, ["worker", "--help"], prog_name="pgtasks", terminal_width=80)

    assert result.exit_code == 0, result.output
    assert result.output == HELP.read_text("utf-8")


def test_worker_keywords_good_and_bad_make_what_they_made_before() -> None:
    before = json.loads(SNAPSHOT.read_text("utf-8"))
    assert set(before) == {name for name, _, _ in CALLS}

    after = outcomes()

    changed = {name: (before[name], after[name]) for name in before if after[name] != before[name]}
    assert not changed
    assert before["unknown keyword"] == (
        "TypeError: Worker.__init__() got an unexpected keyword argument 'concurency'"
    )


def test_an_unknown_keyword_of_derive_is_a_type_error_naming_it() -> None:
    app = App(DSN, schema="unit_tests")
    with pytest.raises(TypeError, match=r"derive\(\) got an unexpected keyword argument 'pol'"):
        WorkerSettings.derive(app.settings, pol="thread")  # type: ignore[call-arg]


def test_every_option_is_a_field_of_the_settings_and_the_worker_takes_them_all() -> None:
    worker_fields = {field.name for field in dataclasses.fields(WorkerSettings)}
    executor_fields = {field.name for field in dataclasses.fields(ExecutorSettings)}
    assert set(EXECUTOR_OPTIONS) == OPTIONS & executor_fields
    assert worker_fields | executor_fields >= OPTIONS
    assert OPTIONS.isdisjoint(worker_fields & executor_fields)
    # Worker(app, queues, *, observers, **options): nothing else is spelled out.
    parameters = inspect.signature(Worker.__init__).parameters
    assert list(parameters) == ["self", "app", "queues", "observers", "options"]
    assert parameters["options"].kind is inspect.Parameter.VAR_KEYWORD


def test_the_command_passes_every_option_under_its_name_with_the_settings_default() -> None:
    command = main.get_command(None, "worker")  # type: ignore[arg-type]
    assert command is not None
    defaults = command.make_context("worker", ["-A", "tasks:app"]).params
    app = App(DSN, schema="unit_tests")
    from_executor_flags = set(worker_executor_options("tasks:app", app, defaults))

    named = set(worker_command.SETTING_OPTIONS)

    assert named <= OPTIONS
    assert named | from_executor_flags == OPTIONS
    for name in named - {"ignore_unknown", *APP_INTERVALS}:  # a flag: off unless given
        assert defaults[name] == option_default(name), name
    assert all(defaults[name] is None for name in APP_INTERVALS)  # the App's


def test_the_worker_shows_its_settings_through_one_kind_of_attribute() -> None:
    app = App(DSN, schema="unit_tests", poll_interval=2)
    worker = Worker(app, ["a"], concurrency=3, prefetch=1)
    shown = {name for name, value in vars(Worker).items() if isinstance(value, Setting)}

    assert shown == {
        "queues",
        "concurrency",
        "lease_timeout",
        "heartbeat_interval",
        "rescue_interval",
        "poll_interval",
        "shutdown_timeout",
        "ignore_unknown",
        "prefetch",
    }
    assert (worker.queues, worker.concurrency, worker.prefetch) == (["a"], 3, 1)
    assert worker.poll_interval == 2.0 == worker.settings.poll_interval
    assert worker.queues is not worker.queues  # a copy each time
    with pytest.raises(AttributeError):
        worker.poll_interval = 1.0  # type: ignore[misc]


def test_the_options_docstring_gives_each_option_once_with_its_default() -> None:
    listed = re.findall(r"``(\w+)`` = ``([^`]*)``", WorkerOptions.__doc__ or "")
    names = [name for name, _ in listed]

    assert sorted(names) == sorted(OPTIONS) and len(names) == len(set(names))
    for name, shown in listed:
        default = None if name in APP_INTERVALS else option_default(name)
        assert shown == repr(default), name
