"""app.conf and config_from_object as Celery reads them (objects, module paths, Celery 3
names, namespaces), crontab fields, and the worker options a Celery app's settings give."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from datetime import timedelta
from typing import ClassVar

import click
import pytest

from pgtasks.celery import Celery, CeleryCompatibilityWarning, crontab
from pgtasks.celery import _state as celery_state
from pgtasks.celery.exceptions import ImproperlyConfigured
from pgtasks.celery.schedules import periodic_options, schedule
from pgtasks.cli.celery_ops import worker_defaults
from pgtasks.cli.worker import worker


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    yield
    for app in celery_state.reset():
        app.close()


class Config:
    task_default_queue = "work"
    worker_concurrency = 6
    worker_prefetch_multiplier = 1
    worker_max_memory_per_child = 204800  # KiB
    CELERYBEAT_SCHEDULE: ClassVar[dict[str, object]] = {"tick": {"task": "t", "schedule": 5.0}}


def test_config_from_object_reads_objects_modules_and_namespaces() -> None:
    app = Celery("conf")
    app.config_from_object(Config)
    assert app.conf.task_default_queue == "work" and app.conf["worker_concurrency"] == 6
    assert app.conf.beat_schedule == {"tick": {"task": "t", "schedule": 5.0}}
    assert app.conf.task_time_limit is None  # unset: Celery's default

    module = types.ModuleType("celery_test_settings")
    module.CELERY_TASK_ROUTES = {"a.*": "queue-a"}  # type: ignore[attr-defined]
    module.CELERY_TIMEZONE = "Europe/Paris"  # type: ignore[attr-defined]
    module.OTHER_SETTING = True  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        other = Celery("django-like")
        other.config_from_object("celery_test_settings", namespace="CELERY")
    finally:
        del sys.modules[module.__name__]
    assert other.conf.task_routes == {"a.*": "queue-a"} and other.conf.timezone == "Europe/Paris"
    assert "other_setting" not in other.conf
    assert other.route_of("a.b") == "queue-a" and other.route_of("b") is None
    with pytest.raises(ImproperlyConfigured, match="no_such_module"):
        Celery("x").config_from_object("no_such_module")
    Celery("y").config_from_object("no_such_module", silent=True)


def test_unknown_settings_are_warned_about_and_accepted_ones_are_not() -> None:
    app = Celery("conf")
    with pytest.warns(CeleryCompatibilityWarning, match="unknown setting 'task_colour'"):
        app.conf.task_colour = "blue"
    app.conf.update(task_acks_late=True, task_track_started=True, result_expires=60)
    assert app.native.settings.prune_done_after == 60.0


def test_crontab_fields_become_a_cron_expression_in_the_app_timezone() -> None:
    entry = crontab(minute="*/15", hour="9-17", day_of_week="monday-friday")
    assert entry.expression == "*/15 9-17 * * mon-fri"
    assert periodic_options(entry, "Europe/Paris") == {
        "cron": "*/15 9-17 * * mon-fri",
        "tz": "Europe/Paris",
    }
    assert periodic_options(timedelta(minutes=2), None) == {"every": timedelta(minutes=2)}
    assert periodic_options(schedule(run_every=30), None) == {"every": timedelta(seconds=30)}
    with pytest.raises(ImproperlyConfigured, match="one second or more"):
        periodic_options(0.5, None)


def test_a_celery_apps_worker_settings_fill_the_options_not_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = Celery("workerconf")
    app.config_from_object(Config)
    module = types.ModuleType("celery_worker_conf_app")
    module.app = app  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)

    def defaults(*arguments: str) -> dict[str, object]:
        context = worker.make_context("worker", ["-A", module.__name__, *arguments])
        with context:
            return worker_defaults(context, module.__name__)

    assert defaults() == {"concurrency": 6, "prefetch": 0, "max_memory_per_child": 200.0}
    assert defaults("-c", "2", "--prefetch", "4") == {"max_memory_per_child": 200.0}
    assert isinstance(worker, click.Command)


def test_app_start_runs_the_command_line_on_its_main_module(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    app = Celery("celery_start_app")

    @app.task
    def ping() -> str:
        return "pong"

    module = types.ModuleType("celery_start_app")
    module.app = app  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    with pytest.raises(SystemExit) as exited:
        app.start(["tasks", "list", "--json"])
    assert exited.value.code == 0
    assert f'"{ping.name}"' in capsys.readouterr().out
