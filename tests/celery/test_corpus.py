"""The corpus of Celery projects (tests/celery/corpus) under pgtasks, with real worker
processes; and the same sources under real Celery in eager mode giving the same results."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pgtasks.celery import states
from pgtasks.celery.exceptions import MaxRetriesExceededError
from tests.support.celery_projects import Project, eager_celery
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

CANVAS_EXAMPLES = (
    "partials",
    "a_signature_by_name",
    "simple_chain",
    "piped_chain",
    "immutable_chain",
    "a_group",
    "group_results",
    "a_chord",
    "chord_with_body",
    "group_piped_to_task",
    "chain_of_chords",
    "a_map",
    "a_starmap",
    "a_chunks",
)


def test_first_steps_runs_on_a_worker_started_the_celery_way(
    project: Callable[[str], Project], celery_project: Callable[[str], Path]
) -> None:
    first = project("first_steps")
    tasks = first.module("tasks")
    # Celery's default pool runs tasks in child processes: so does this worker.
    worker = first.worker("tasks", "-Q", "celery", "-c", "2", "--pool", "process")
    result = tasks.add.delay(4, 4)
    assert result.get(timeout=60) == 8
    assert result.state == states.SUCCESS and result.successful() and result.ready()
    # The same job as a pgtasks job: visible to the native API (and CLI, dashboard).
    row = tasks.app.native.get_job(int(result.id)).fetch()
    assert (row.task_name, row.queue, row.args) == ("tasks.add", "celery", [4, 4])
    worker.stop()

    sys.modules.pop("tasks", None)
    celery_project("first_steps")
    theirs = importlib.import_module("tasks")
    eager_celery(theirs.app)
    assert theirs.add.delay(4, 4).get() == result.get() == 8
    assert type(theirs.app).__module__.startswith("celery.")


def _celery_results(
    celery_project: Callable[[str], Path], module: str, names: Any
) -> dict[str, Any]:
    celery_project("next_steps")
    proj_celery = importlib.import_module("proj.celery")
    eager_celery(proj_celery.app)
    examples = importlib.import_module(module)
    return {name: _plain(getattr(examples, name)()) for name in names}


def _plain(value: Any) -> Any:
    """Results as JSON gives them back (tuples are lists)."""
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def test_the_canvas_guide_gives_celerys_results_on_durable_workflows(
    project: Callable[[str], Project], celery_project: Callable[[str], Path]
) -> None:
    steps = project("next_steps")
    worker = steps.worker("proj", "-c", "4")
    examples = steps.module("canvas_examples")
    ours = {name: _plain(getattr(examples, name)()) for name in CANVAS_EXAMPLES}
    worker.stop()
    assert ours["simple_chain"] == 16
    assert ours["a_chord"] == 90
    assert ours["a_map"] == [45, 4950]
    assert ours["a_chunks"] == [[2 * n for n in range(k, k + 5)] for k in range(0, 20, 5)]

    steps_modules = [name for name in list(sys.modules) if name.startswith("proj")]
    for name in [*steps_modules, "canvas_examples"]:
        sys.modules.pop(name, None)
    theirs = _celery_results(celery_project, "canvas_examples", CANVAS_EXAMPLES)
    assert ours == theirs


def test_the_tasks_guide_retries_behave_as_in_celery(
    project: Callable[[str], Project], celery_project: Callable[[str], Path]
) -> None:
    guide = project("tasks_guide")
    retrying = guide.module("retrying")
    worker = guide.worker("retrying", "-c", "4")
    ours = _retry_outcomes(retrying)
    worker.stop()
    assert ours["send_twitter_status"] == {"retries": 2, "id_is_set": True}
    assert ours["exhausted_with_exc"] == ("ConnectionError", "fail whale 3")
    assert ours["exhausted_without_exc"][0] == "MaxRetriesExceededError"
    assert ours["autoretry_exhausted"][0] == "ZeroDivisionError"
    assert ours["autoretry"] == ["k", 2]
    assert ours["forever"] == 3
    assert "after_return SUCCESS" in worker.log()

    sys.modules.pop("retrying", None)
    celery_project("tasks_guide")
    theirs_module = importlib.import_module("retrying")
    eager_celery(theirs_module.app, propagates=False)
    theirs = _retry_outcomes(theirs_module)
    assert ours == theirs


def _failure(call: Callable[[], Any]) -> tuple[str, str]:
    try:
        call()
    except Exception as error:
        return type(error).__name__, str(error).split(" args:")[0].split("[")[0]
    raise AssertionError("expected the task to fail")


def _retry_outcomes(module: Any) -> dict[str, Any]:
    def get(result: Any) -> Any:
        return result.get(timeout=60)

    outcomes: dict[str, Any] = {
        "send_twitter_status": get(module.send_twitter_status.delay(2)),
        "exhausted_with_exc": _failure(lambda: get(module.send_twitter_status.delay(9))),
        "exhausted_without_exc": _failure(lambda: get(module.without_exc.delay())),
        "autoretry_exhausted": _failure(lambda: get(module.divide.delay(1, 0))),
        "autoretry": _plain(get(module.lookup.delay("k", 2))),
        "forever": get(module.until_third.delay()),
        "hooks": get(module.with_hooks.delay(5)),
        "renamed": get(module.renamed.delay(2)),
    }
    return outcomes


def test_max_retries_exceeded_is_the_front_s_class(project: Callable[[str], Project]) -> None:
    guide = project("tasks_guide")
    retrying = guide.module("retrying")
    worker = guide.worker("retrying")
    with pytest.raises(MaxRetriesExceededError, match=r"Can't retry retrying\.without_exc"):
        retrying.without_exc.delay().get(timeout=60)
    result = retrying.without_exc.delay()
    assert result.get(timeout=60, propagate=False).__class__ is MaxRetriesExceededError
    assert result.state == states.FAILURE and result.failed()
    assert "MaxRetriesExceededError" in (result.traceback or "")
    worker.stop()


def test_the_canvas_guide_error_callback_receives_what_celerys_does(
    project: Callable[[str], Project], celery_project: Callable[[str], Path]
) -> None:
    steps = project("next_steps")
    worker = steps.worker("proj", "-c", "2")
    examples = steps.module("canvas_examples")
    ours_id = examples.an_error_callback()
    ours_log = steps.path / "proj" / "error_log" / ours_id
    wait_until(ours_log.exists, timeout=60, message="the error callback's log")
    worker.stop()
    ours = _error_log(ours_log.read_text())

    for name in [name for name in list(sys.modules) if name.startswith("proj")]:
        sys.modules.pop(name, None)
    sys.modules.pop("canvas_examples", None)
    copy = celery_project("next_steps")
    proj_celery = importlib.import_module("proj.celery")
    eager_celery(proj_celery.app, propagates=False)
    theirs_id = importlib.import_module("canvas_examples").an_error_callback()
    theirs = _error_log((copy / "proj" / "error_log" / theirs_id).read_text())

    assert ours == theirs
    assert ours["task"] == "task=proj.tasks.add args=['2', 2]"
    assert ours["error"] == """TypeError: can only concatenate str (not "int") to str"""


def _error_log(text: str) -> dict[str, Any]:
    """What the guide's log_error wrote that does not depend on the run: the request's
    task and arguments, the traceback's last line (the exception), and that the line
    starts with the request's id."""
    lines = [line for line in text.splitlines() if line.strip()]
    return {
        "task": lines[-1],
        "error": lines[-2].strip(),
        "traceback": any(line.startswith("Traceback") or " Traceback" in line for line in lines),
    }
