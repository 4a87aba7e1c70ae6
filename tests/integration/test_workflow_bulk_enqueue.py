"""A large workflow's jobs go by COPY (copy_workflow_jobs), a small one's by one INSERT
from JSON arrays (insert_workflow_jobs): both write the same rows, and a chord enqueued
by COPY starts its callback with its members' results in order."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pgtasks import App, chain, chord, group
from pgtasks._store import workflows as workflow_store
from tests.support.inprocess import select
from tests.support.workflows import settle, steps

MEMBERS = 70  # at least COPY_MIN_JOBS: the COPY path

COLUMNS = (
    "task_name, queue, priority, args, kwargs, meta, max_attempts, status, workflow_step,"
    " waiting_for, input_mode, limit_groups, limit_key, attempts, run_at IS NOT NULL,"
    " array_length(next_ids, 1), array_length(prev_ids, 1)"
)


@pytest.fixture
def tasks(app: App) -> dict[str, Any]:
    @app.task(name="add")
    def add(a: int, b: int = 0) -> int:
        return a + b

    @app.task(name="total")
    def total(values: list[int], scale: int = 1) -> int:
        return sum(values) * scale

    return {"add": add, "total": total}


def canvas(tasks: dict[str, Any]) -> Any:
    add, total = tasks["add"], tasks["total"]
    members = [add.si(n, b=n).set(priority=n % 3) for n in range(MEMBERS)]
    return chain(add.si(1, 2), chord(group(members), total.s(scale=2)), add.s(5))


def rows(admin: Any, app: App, workflow_id: int) -> list[tuple[Any, ...]]:
    """A workflow's rows in id order, links as positions (ids differ between two)."""
    found = select(
        admin,
        app,
        f"SELECT id, next_ids, prev_ids, {COLUMNS} FROM {{schema}}.jobs"
        " WHERE workflow_id = %s ORDER BY id",
        [workflow_id],
    )
    position = {row[0]: index for index, row in enumerate(found)}
    return [
        (
            [position[i] for i in row[1] or []],
            [position[i] for i in row[2] or []],
            *row[3:],
        )
        for row in found
    ]


def test_copy_and_insert_write_the_same_rows(
    app: App, admin: Any, tasks: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    copied = canvas(tasks).delay()
    monkeypatch.setattr(workflow_store, "COPY_MIN_JOBS", 10**9)
    inserted = canvas(tasks).delay()
    written = rows(admin, app, copied.id)
    assert len(written) == MEMBERS + 3
    assert written == rows(admin, app, inserted.id)
    assert written[0][:2] == ([i + 1 for i in range(MEMBERS)], [])  # the first step's successors
    assert written[-2][1] == [i + 1 for i in range(MEMBERS)]  # the callback's predecessors


def test_a_chord_enqueued_by_copy_starts_its_callback_with_the_results_in_order(
    app: App, admin: Any, tasks: dict[str, Any]
) -> None:
    add, total = tasks["add"], tasks["total"]
    flow = chord(group(add.s(n) for n in range(MEMBERS)), total.s(scale=2)).delay()
    by_step = steps(app, flow.id)
    members = [by_step[f"0.{n}"]["id"] for n in range(MEMBERS)]
    assert {by_step[f"0.{n}"]["status"] for n in range(MEMBERS)} == {"pending"}
    assert by_step["1"]["status"] == "waiting"
    settle(app, {job_id: n for n, job_id in enumerate(members)})
    callback = steps(app, flow.id)["1"]
    assert callback["status"] == "pending"
    [(args, kwargs)] = select(
        admin, app, "SELECT args, kwargs FROM {schema}.jobs WHERE id = %s", [callback["id"]]
    )
    assert (args, kwargs) == ([list(range(MEMBERS))], {"scale": 2})


def test_the_async_enqueue_copies_a_large_workflow_too(
    app: App, admin: Any, tasks: dict[str, Any]
) -> None:
    add = tasks["add"]

    async def enqueue() -> Any:
        return await group(add.si(n) for n in range(MEMBERS)).adelay()

    flow = asyncio.run(enqueue())
    found = select(
        admin,
        app,
        "SELECT count(*), min(status), max(status), count(next_ids), count(prev_ids)"
        " FROM {schema}.jobs WHERE workflow_id = %s",
        [flow.id],
    )
    assert found == [(MEMBERS, "pending", "pending", 0, 0)]
    assert sorted(flow.job_ids) == [
        row[0]
        for row in select(
            admin, app, "SELECT id FROM {schema}.jobs WHERE workflow_id = %s ORDER BY id", [flow.id]
        )
    ]
