"""Eager mode: tasks run inline on delay(), with the same checks, and no database."""

from __future__ import annotations

import asyncio

import pytest

from pgtasks import App, JobContext, JobStatus, TaskFailed

NOWHERE = "postgresql://nobody@127.0.0.1:1/none"


def test_eager_app_runs_the_task_on_delay_and_get_returns_the_result() -> None:
    app = App(NOWHERE, eager=True)
    calls: list[tuple[int, int]] = []

    @app.task
    def add(a: int, b: int) -> int:
        calls.append((a, b))
        return a + b

    job = add.delay(2, b=3)

    assert calls == [(2, 3)]
    assert job.get() == 5
    assert job.status() is JobStatus.DONE
    assert job.refresh().attempts == 1
    assert job.cancel().outcome == "already_finished"


def test_eager_block_only_applies_inside_the_with_statement() -> None:
    app = App(NOWHERE)

    @app.task
    def echo(value: str) -> str:
        return value

    with app.eager():
        assert app.is_eager
        assert echo.delay("inline").get() == "inline"
    assert not app.is_eager


def test_eager_arguments_go_through_json_like_a_real_job() -> None:
    app = App(NOWHERE, eager=True)

    @app.task
    def shape(items: list[int], mapping: dict[str, int]) -> str:
        return f"{type(items).__name__}:{sorted(mapping)}"

    assert shape.delay((1, 2), {"b": 1, "a": 2}).get() == "list:['a', 'b']"
    with pytest.raises(TypeError, match="'items'"):
        shape.delay(object(), {})
    with pytest.raises(TypeError, match="do not match"):
        shape.delay()  # type: ignore[call-arg]


def test_eager_failure_is_kept_for_get_not_raised_by_delay() -> None:
    app = App(NOWHERE, eager=True)

    @app.task
    def explode() -> None:
        raise ValueError("boom")

    job = explode.delay()

    assert job.status() is JobStatus.FAILED
    with pytest.raises(TaskFailed) as failure:
        job.get()
    assert (failure.value.exc_type, failure.value.message) == ("ValueError", "boom")


def test_eager_non_json_result_fails_the_job() -> None:
    app = App(NOWHERE, eager=True)

    @app.task
    def bad() -> object:
        return object()

    with pytest.raises(TaskFailed, match="PayloadNotSerializableError"):
        bad.delay().get()


def test_eager_bound_tasks_get_a_context_and_async_tasks_run() -> None:
    app = App(NOWHERE, eager=True)

    @app.task(bind=True)
    def who(ctx: JobContext) -> str:
        return f"{ctx.task_name}:{ctx.attempt}:{ctx.cancelled()}"

    @app.task
    async def later(value: int) -> int:
        await asyncio.sleep(0)
        return value + 1

    assert who.delay().get().endswith(":1:False")
    assert later.delay(1).get() == 2

    async def from_asyncio() -> int:
        job = await later.adelay(41)
        return await job.aget()

    assert asyncio.run(from_asyncio()) == 42
    assert [job.get() for job in later.delay_many([{"value": 1}, {"value": 2}])] == [2, 3]
