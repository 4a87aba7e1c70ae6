"""The Periodic Tasks guide's and the Django guide's projects under pgtasks: schedules as
Celery configures them (compared with real Celery's), run by `worker -B` and listed by
`pgtasks schedules`; the Django layout (config_from_object("django.conf:settings",
namespace="CELERY"), autodiscover_tasks(), @shared_task) run by `pgtasks -A mysite
worker`, its results equal to real Celery's (eager)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pgtasks.celery import CeleryCompatibilityWarning
from pgtasks.cli import main
from tests.support.celery_projects import Project
from tests.support.inprocess import select
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance


def _entries_of_ours(app: Any) -> dict[str, Any]:
    return {
        name: [schedule.task_name, list(schedule.args), schedule.trigger.describe()]
        for name, schedule in app.native.schedules.items()
    }


def _entries_of_celery(app: Any) -> dict[str, Any]:
    found = {}
    for name, entry in app.conf.beat_schedule.items():
        when = entry["schedule"]
        if hasattr(when, "_orig_minute"):
            text = (
                f"cron '{when._orig_minute} {when._orig_hour} {when._orig_day_of_month}"
                f" {when._orig_month_of_year} {when._orig_day_of_week}' {app.conf.timezone}"
            )
        else:
            text = f"every {float(when):g}s"
        found[name] = [entry["task"], list(entry["args"]), text]
    return found


def test_periodic_tasks_are_configured_as_celery_configures_them_and_beat_runs_them(
    project: Callable[[str], Project],
    celery_project: Callable[[str], Path],
    admin: Any,
) -> None:
    periodic = project("periodic")
    beat_app = periodic.module("beat_app")
    ours = _entries_of_ours(beat_app.app)
    assert ours["add every 1"] == ["beat_app.test", ["hello"], "every 1s"]
    assert ours["add-every-monday-morning"] == [
        "beat_app.add",
        [16, 16],
        "cron '30 7 * * 1' Europe/London",
    ]

    # The Celery way: a worker with its embedded beat (-B).
    worker = periodic.worker("beat_app", "-B")
    app = periodic.app
    wait_until(
        lambda: (
            select(
                admin,
                app,
                "SELECT count(*) FROM {schema}.all_jobs"
                " WHERE task_name = 'beat_app.test' AND status = 'done'",
            )[0][0]
            >= 1
        ),
        timeout=60,
        message="a job of the every-second schedule, run",
    )
    worker.stop()
    assert "hello" in worker.log()
    listed = CliRunner().invoke(main, ["-A", "beat_app", "schedules", "--json"])
    assert listed.exit_code == 0, listed.output
    assert {"add every 1", "add-every-30-seconds"} <= {
        entry["name"] for entry in json.loads(listed.output)["schedules"]
    }

    importlib.invalidate_caches()
    __import__("sys").modules.pop("beat_app", None)
    celery_project("periodic")
    theirs_module = importlib.import_module("beat_app")
    theirs_module.app.loader.import_default_modules()
    theirs = _entries_of_celery(theirs_module.app)
    assert {name: entry[:2] for name, entry in ours.items()} == {
        name: entry[:2] for name, entry in theirs.items()
    }
    assert ours["add-every-monday-morning"] == theirs["add-every-monday-morning"]
    assert ours["add-every-30-seconds"] == theirs["add-every-30-seconds"]


@pytest.mark.timeout(240)  # six Python processes that import Django
@pytest.mark.slow
def test_the_django_layout_works_unchanged_but_for_imports(
    project: Callable[[str], Project], celery_project: Callable[[str], Path], admin: Any
) -> None:
    django = project("django_guide")
    worker = django.worker("mysite", "-Q", "demo,celery")
    env = {**django.env, "DJANGO_SETTINGS_MODULE": "mysite.settings"}

    def run(*arguments: str) -> str:
        done = subprocess.run(
            django.command("-A", "mysite", *arguments),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    # Routed by CELERY_TASK_ROUTES (a glob) to the "demo" queue; found by autodiscovery.
    job_id = run("call", "demoapp.tasks.add", "--args", "[2, 3]").strip().split()[-1]
    wait_until(
        lambda: (
            select(
                admin,
                django.app,
                "SELECT status FROM {schema}.all_jobs WHERE id = %s",
                (int(job_id),),
            )
            == [("done",)]
        ),
        timeout=60,
        message="the job done",
    )
    assert run("result", job_id).strip() == "5"
    registered = json.loads(run("inspect", "registered", "--json"))
    (names,) = registered.values()
    assert {"demoapp.tasks.add", "mysite.celery.debug_task"} <= set(names)
    rows = select(
        admin,
        django.app,
        "SELECT queue FROM {schema}.all_jobs WHERE id = %s",
        (int(job_id),),
    )
    assert rows == [("demo",)]
    ours = json.loads(_python(DJANGO_CANVAS.format(package="pgtasks.celery", eager=False), env))
    worker.stop()
    assert "CELERY_TASK_TRACK_STARTED" not in worker.log()

    # The same calls under real Celery (eager), from the sources with Celery's imports.
    copy = celery_project("django_guide")
    theirs_env = {**env, "PYTHONPATH": f"{copy}:{env['PYTHONPATH']}", "PGTASKS_DSN": "memory://"}
    theirs_env["PYTHONPATH"] = theirs_env["PYTHONPATH"].replace(f"{django.path}:", "")
    theirs = json.loads(_python(DJANGO_CANVAS.format(package="celery", eager=True), theirs_env))
    assert ours == theirs == [5, 6, [0, 1, 4, 9]]


#: Calls made from a Django process (the Django guide's way), printed as JSON.
DJANGO_CANVAS = """
import json, os, warnings
warnings.simplefilter("ignore")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
import django
django.setup()
from mysite import celery_app
from {package} import chord, group
from demoapp.tasks import add, mul, xsum
if {eager}:
    celery_app.conf.task_always_eager = True
print(json.dumps([
    add.delay(2, 3).get(timeout=60),
    chord([add.s(1, 1), mul.s(2, 2)], xsum.s())().get(timeout=60),
    group(mul.s(n, n) for n in range(4))().get(timeout=60),
]))
"""


def _python(script: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_a_setting_with_no_meaning_here_is_warned_about_by_name(
    project: Callable[[str], Project],
) -> None:
    project("first_steps")
    from pgtasks.celery import Celery

    app = Celery("warned")
    with pytest.warns(CeleryCompatibilityWarning, match="'result_backend'"):
        app.conf.result_backend = "redis://localhost"
    with pytest.warns(CeleryCompatibilityWarning, match="'broker_transport_options'"):
        app.conf.update(broker_transport_options={"visibility_timeout": 3600})
    with pytest.warns(CeleryCompatibilityWarning, match="is not a PostgreSQL DSN"):
        Celery("amqp", broker="pyamqp://guest@localhost//")
