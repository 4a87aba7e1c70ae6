"""A Django task's jobs carry the task's own path as their task name (what the admin,
the dashboard, the CLI and stats show), and a job row never decides what is imported:
result lookups and the worker resolve only tasks the process already knows."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from pgtasks.contrib.django import get_app
from pgtasks.contrib.django._compat import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
)
from pgtasks.contrib.django.results import loaded_tasks, registered_task
from tests.apps.django_project.shop import tasks
from tests.support.environment import ROOT
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

TRAP = "tests.apps.django_project.shop.trap"


def insert_row(task_name: str, payload: dict[str, Any]) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgtasks.jobs (task_name, queue, priority, args, kwargs, max_attempts)"
            " VALUES (%s, 'default', 0, '[]', %s::jsonb, 1) RETURNING id",
            [task_name, json.dumps(payload)],
        )
        (job_id,) = cursor.fetchone()
    return str(job_id)


def status_of(job_id: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT status FROM pgtasks.all_jobs WHERE id = %s", [int(job_id)])
        (value,) = cursor.fetchone()
    return str(value)


def test_a_result_lookup_never_imports_a_module_a_row_names() -> None:
    backend = task_backends["default"]
    for task_name in (f"{TRAP}.sprung", "pgtasks.django.run"):
        job_id = insert_row(
            task_name, {"task": f"{TRAP}.sprung", "args": [], "kwargs": {}, "backend": "default"}
        )
        with pytest.raises(InvalidTask, match="not loaded in this process"):
            backend.get_result(job_id)
    assert TRAP not in sys.modules
    with pytest.raises(InvalidTask, match="not loaded"):
        registered_task("no.such.module.task")
    with pytest.raises(InvalidTask, match="is not a Django task"):
        registered_task("subprocess.check_output")  # imported, but not a task


def test_a_row_whose_kwargs_name_another_task_is_no_result() -> None:
    backend = task_backends["default"]
    mismatch = insert_row(
        tasks.add.module_path,
        {"task": tasks.send_email.module_path, "args": [1], "kwargs": {}, "backend": "default"},
    )
    plain = insert_row(tasks.add.module_path, {"a": 1})
    for job_id in (mismatch, plain):
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(job_id)


def test_rows_of_earlier_releases_still_read_and_run(start_worker: Callable[..., Any]) -> None:
    legacy = insert_row(
        "pgtasks.django.run",
        {"task": tasks.add.module_path, "args": [20, 22], "kwargs": {}, "backend": "default"},
    )
    result = task_backends["default"].get_result(legacy)
    assert result.task.func is tasks.add.func
    start_worker()

    def finished() -> Any:
        fresh = task_backends["default"].get_result(legacy)
        return fresh if fresh.is_finished else None

    done = wait_until(finished, timeout=20, message="the legacy row to run")
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == 42


def test_the_worker_runs_tasks_by_their_path_and_never_imports_a_trap(
    start_worker: Callable[..., Any], django_env: dict[str, str], tmp_path: Path
) -> None:
    mark = tmp_path / "trap-imported"
    django_env["PGTASKS_DJANGO_TRAP"] = str(mark)
    start_worker()
    trapped = [
        insert_row(
            "pgtasks.django.run",
            {"task": f"{TRAP}.sprung", "args": [], "kwargs": {}, "backend": "default"},
        )
    ]
    unknown = insert_row(
        f"{TRAP}.sprung", {"task": f"{TRAP}.sprung", "args": [], "kwargs": {}, "backend": "default"}
    )
    added = tasks.add.enqueue(2, 3)
    wait_until(
        lambda: task_backends["default"].get_result(added.id).is_finished,
        timeout=20,
        message="the task to run",
    )
    assert task_backends["default"].get_result(added.id).return_value == 5
    wait_until(lambda: status_of(trapped[0]) == "failed", timeout=20, message="the legacy trap")
    # Whatever a worker does with a task it does not know, it never imports its module.
    assert status_of(unknown) in ("pending", "failed")
    assert not mark.exists()


def test_the_worker_knows_every_django_task_under_its_path(django_env: dict[str, str]) -> None:
    probe = (
        "from pgtasks.contrib.django.worker import app;"
        " print('\\n'.join(sorted(name for name in app.tasks)))"
    )
    listed = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=django_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    for task in (tasks.add, tasks.send_email, tasks.flaky, tasks.async_add):
        assert task.module_path in listed
    assert "pgtasks.django.run" in listed  # rows of earlier releases
    assert "shop.count_orders" in listed  # a pgtasks task of the project
    assert {task.module_path for task in loaded_tasks([tasks])} >= {tasks.add.module_path}


def test_the_dashboard_lists_django_jobs_by_their_path() -> None:
    pytest.importorskip("jinja2", reason="the dashboard needs the web extra")
    from pgtasks.web import asgi
    from tests.support.web import Client

    result = tasks.send_email.enqueue("a@example.com")
    page = Client(asgi(get_app())).get("/jobs").text
    assert f'<tr data-job="{result.id}">' in page
    assert "tests.apps.django_project.shop.tasks.send_email" in page
