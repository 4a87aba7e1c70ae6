"""Planning a workflow (no database): steps, links, inputs, and the text tree."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone
from typing import Any

import pytest

from pgtasks import App, WorkflowError, chain, chord, group
from pgtasks._app.workflow_rows import with_meta
from pgtasks._app.workflows import MAX_DEPTH, _on_error_job, _on_error_json, _Plan, shape
from pgtasks._jobs import StepJob
from pgtasks._store.workflows import WorkflowQueries
from pgtasks._workflows_text import failed_step, format_workflow, step_key


@pytest.fixture
def tasks() -> Any:
    app = App("postgresql://unused@localhost/unused", schema="plan_test")

    @app.task(name="a")
    def a(*values: Any) -> int:
        return 1

    @app.task(name="two")
    def two(x: int, y: int) -> int:
        return x + y

    return app, a, two


def summary(plan: _Plan) -> list[tuple[str, list[int], list[int], str | None]]:
    return [(node.step, node.prev, node.next, node.input_mode) for node in plan.nodes]


def test_chain_with_a_chord_step_links_every_job(tasks: Any) -> None:
    _, a, _ = tasks
    plan = _Plan(chain(a.s(), chord([a.s(), a.si()], a.s()), a.s()))
    assert summary(plan) == [
        ("0", [], [1, 2], None),
        ("1.0.0", [0], [3], "one"),
        ("1.0.1", [0], [3], None),  # immutable: receives nothing
        ("1.1", [1, 2], [4], "list"),
        ("2", [3], [], "one"),
    ]
    assert (plan.terminals, plan.terminal_kind) == ([4], "one")


def test_a_group_in_a_chain_becomes_a_chord_and_a_final_group_a_list(tasks: Any) -> None:
    _, a, _ = tasks
    plan = _Plan(chain(group(a.s(), a.s()), a.s(), group(a.s(), a.s())))
    assert summary(plan)[2] == ("1", [0, 1], [3, 4], "list")
    assert (plan.terminals, plan.terminal_kind) == ([3, 4], "list")


def test_bad_shapes_are_refused_before_anything_is_written(tasks: Any) -> None:
    app, a, two = tasks
    with pytest.raises(WorkflowError, match="ends in a group"):
        _Plan(group(a.s(), chain(a.s(), group(a.s(), a.s()))))
    with pytest.raises(WorkflowError, match="do not match task 'two'"):
        _Plan(chain(a.s(), two.s(1, 2))).steps(app)
    assert _Plan(chain(a.s(), two.s(1))).steps(app)[1].spec.args_json == "[1]"
    with pytest.raises(
        WorkflowError, match=r"options of step 1 two\.s\(1\): priority must be an int"
    ):
        _Plan(chain(a.s(), two.s(1).set(priority="high"))).steps(app)
    with pytest.raises(WorkflowError, match=r"options of step 0 a\.s\(\): max_attempts must be"):
        _Plan(chain(a.s().set(max_attempts=0))).steps(app)
    with pytest.raises(WorkflowError, match="callback signature is missing"):
        chord([a.s()])
    with pytest.raises(WorkflowError, match="at least one step"):
        chain()


def test_steps_are_frozen_records_whose_links_become_the_reserved_ids(tasks: Any) -> None:
    app, a, two = tasks
    steps = _Plan(chain(a.s(), group(two.s(1), a.si(7)), a.s())).steps(app)
    assert [(s.step, s.input_mode, s.prev, s.next) for s in steps] == [
        ("0", None, (), (1, 2)),
        ("1.0", "one", (0,), (3,)),
        ("1.1", None, (0,), (3,)),
        ("2", "list", (1, 2), ()),
    ]
    assert isinstance(steps[0], StepJob) and steps[2].spec.args_json == "[7]"
    with pytest.raises(dataclasses.FrozenInstanceError):
        steps[0].step = "9"  # type: ignore[misc]
    params = WorkflowQueries._workflow_jobs_params(5, [40, 41, 42, 43], steps)
    assert json.loads(params["id"]) == [40, 41, 42, 43] and params["workflow_id"] == 5
    # No link: null (next_ids or prev_ids NULL, as the COPY path writes it).
    assert json.loads(params["next"]) == [[41, 42], [43], [43], None]
    assert json.loads(params["prev"]) == [None, [40], [40], [41, 42]]
    assert json.loads(params["waiting_for"]) == [0, 1, 1, 2]
    assert json.loads(params["args"]) == [[], [1], [7], []]
    assert params["meta"] is None and params["limit_groups"] is None
    traced = with_meta(steps, [dataclasses.replace(s.spec, meta_json='{"t":1}') for s in steps])
    assert json.loads(WorkflowQueries._workflow_jobs_params(5, [1, 2, 3, 4], traced)["meta"]) == (
        [{"t": 1}] * 4
    )
    with pytest.raises(ValueError, match="need as many ids"):
        WorkflowQueries._workflow_jobs_params(5, [1], steps)


def test_the_on_error_job_is_kept_with_its_arguments_as_encoded(tasks: Any) -> None:
    app, _, two = tasks
    job = _on_error_job(app, two.s(3).set(queue="alerts", priority=2))
    assert job is not None and job.input_mode == "one"
    assert json.loads(_on_error_json(job)) == {
        "task_name": "two",
        "queue": "alerts",
        "priority": 2,
        "max_attempts": job.spec.max_attempts,
        "input_mode": "one",
        "args": [3],
        "kwargs": {},
    }
    immutable = _on_error_job(app, two.si(1, y={"n": [1]}))
    assert immutable is not None
    assert json.loads(_on_error_json(immutable))["input_mode"] is None
    assert json.loads(_on_error_json(immutable))["args"] == [1]
    assert json.loads(_on_error_json(immutable))["kwargs"] == {"y": {"n": [1]}}


def test_steps_sort_as_numbers_and_render_as_a_tree() -> None:
    assert sorted(["10", "2", "1.1", "on_error", "1.0.1"], key=step_key) == [
        "1.0.1",
        "1.1",
        "2",
        "10",
        "on_error",
    ]
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def job(step: str, status: str, **extra: Any) -> dict[str, Any]:
        return {"id": len(step), "workflow_step": step, "task_name": "t", "status": status, **extra}

    text = format_workflow(
        {
            "id": 3,
            "kind": "chain",
            "status": "failed",
            "created_at": now,
            "finished_at": now,
            "jobs": [
                job("1", "waiting", prev_ids=[1]),
                job("0", "failed", last_error="Traceback\nRuntimeError: \x1b[31mboom"),
            ],
        }
    )
    lines = text.splitlines()
    assert lines[0].startswith("workflow 3 (chain): failed, created 2026-01-01 00:00:00")
    assert lines[1].split()[:5] == ["0", "t", "job", "1", "failed"]
    assert "RuntimeError" in lines[1] and "\x1b" not in text
    assert lines[2].endswith("(after job 1)")


def test_shapes_name_the_workflow_on_one_line(tasks: Any) -> None:
    _, a, two = tasks
    times = "\N{MULTIPLICATION SIGN}"
    assert shape(chain(a.s())) == "a"
    assert shape(chain(a.s(), chord([two.s(1), two.s(2), two.s(3)], a.s()), a.s())) == (
        f"a → [3{times}two] → a → a"
    )
    nested = chord([a.s(), chord([two.s(1), two.s(2)], a.s()), a.s()], a.s())
    assert shape(nested) == f"[a, ([2{times}two] → a), a] → a"
    assert shape(group(a.s(), chain(a.s(), two.s(1)))) == "[a, (a → two)]"
    wide = group([a.s(), two.s(1), a.s(), two.s(1), a.s(), two.s(1), two.s(1)])
    assert shape(wide) == "[a, two, a, two, +3 more]"
    assert shape(group(a.s() for _ in range(10_000))) == f"[10000{times}a]"


def test_depth_counts_nested_workflows_and_is_checked_when_built(tasks: Any) -> None:
    _, a, _ = tasks
    assert a.s().depth == 0
    assert chain(a.s(), a.s()).depth == 1
    assert chain(chain(a.s()), chain(a.s())).depth == 1  # one chain
    assert chord([a.s(), chord([a.s()], a.s())], a.s()).depth == 2
    canvas: Any = a.s()
    for _ in range(MAX_DEPTH):
        canvas = group(a.s(), canvas)
    assert canvas.depth == MAX_DEPTH
    with pytest.raises(
        WorkflowError, match=f"at most {MAX_DEPTH} deep .* would be {MAX_DEPTH + 1}"
    ):
        chain(a.s(), canvas)


def test_the_failed_step_behind_a_job_is_its_first_failed_ancestor() -> None:
    def at(second: int) -> datetime:
        return datetime(2026, 1, 1, 0, 0, second, tzinfo=timezone.utc)

    jobs = [
        {"id": 1, "status": "done", "prev_ids": None, "finished_at": at(1)},
        {"id": 2, "status": "failed", "prev_ids": [1], "finished_at": at(5)},
        {"id": 3, "status": "failed", "prev_ids": [1], "finished_at": at(3)},
        {"id": 4, "status": "cancelled", "prev_ids": [2, 3], "finished_at": at(6)},
        {"id": 5, "status": "cancelled", "prev_ids": [4], "finished_at": at(6)},
        {"id": 6, "status": "cancelled", "prev_ids": [1], "finished_at": at(2)},
    ]
    assert failed_step(jobs, 5)["id"] == 3  # type: ignore[index]
    assert failed_step(jobs, 2)["id"] == 2  # type: ignore[index]
    assert failed_step(jobs, 6) is None  # cancelled by a user: no failed ancestor
    assert failed_step(jobs, 99) is None
