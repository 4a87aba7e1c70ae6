"""In-process Worker: results, context, retries, ordering, queues, wake-ups, exactly-once.

Failure paths (timeouts, fencing, rescue, shutdown, unknown tasks) are in
test_worker_failures.py. Every test runs a real Worker in a thread against PostgreSQL.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import threading
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgtasks import (
    App,
    Discard,
    JobContext,
    JobStatus,
    Retry,
    SchemaNotMigratedError,
    Worker,
)
from tests.support.inprocess import finished, is_listening, running_worker, select
from tests.support.waiting import wait_until


def database_clock(app: App, job_id: int) -> tuple[datetime, datetime]:
    """(the job's run_at, the server's clock_timestamp()) read now, from inside a task."""
    query = sql.SQL("SELECT run_at, clock_timestamp() FROM {}.all_jobs WHERE id = %s").format(
        sql.Identifier(app.schema)
    )
    with app.connection() as conn:
        row = conn.execute(query, [job_id]).fetchone()
    assert row is not None
    return row[0], row[1]


# -- results and context --


def test_stores_the_return_value_of_a_sync_task_as_json(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task
    def summarise(numbers: list[int], label: str) -> dict[str, Any]:
        return {"label": label, "total": sum(numbers), "items": numbers, "none": None, "half": 0.5}

    handle = summarise.delay([1, 2, 3], label="déjà vu")
    with running_worker(app):
        row = finished(handle)

    assert row.status is JobStatus.DONE
    assert row.attempts == 1
    assert row.result == {
        "label": "déjà vu",
        "total": 6,
        "items": [1, 2, 3],
        "none": None,
        "half": 0.5,
    }
    assert row.last_error is None
    assert row.finished_at is not None
    assert select(
        admin, app, "SELECT jsonb_typeof(result) FROM {schema}.all_jobs WHERE id = %s", [handle.id]
    ) == [("object",)]


def test_stores_the_return_value_of_an_async_task(app: App) -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    @app.task
    async def fetch_page(page: int) -> list[Any]:
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0.01)
        return [page, "rows", None]

    handles = [fetch_page.delay(page) for page in range(3)]
    with running_worker(app):
        rows = [finished(handle) for handle in handles]

    assert [row.result for row in rows] == [[0, "rows", None], [1, "rows", None], [2, "rows", None]]
    assert {row.status for row in rows} == {JobStatus.DONE}
    assert len(set(map(id, loops))) == 1, "async tasks share one event loop"


def test_stopping_a_worker_closes_its_event_loop(app: App) -> None:
    @app.task
    async def noop() -> None:
        await asyncio.sleep(0)

    handle = noop.delay()
    with running_worker(app) as worker:
        finished(handle)
    del worker
    wait_until(
        lambda: not any(thread.name == "pgtasks-async" for thread in threading.enumerate()),
        message="the event loop thread to end",
    )

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
    leaks = [str(warning.message) for warning in caught if warning.category is ResourceWarning]
    assert leaks == []


def test_passes_a_job_context_to_a_bound_task(app: App) -> None:
    contexts: list[JobContext] = []

    @app.task(bind=True, queue="reports", max_attempts=4)
    def build_report(context: JobContext, month: str) -> str:
        contexts.append(context)
        if context.attempt == 1:
            raise Retry(delay=0)
        return month

    handle = build_report.delay("2024-05")
    with running_worker(app) as worker:
        row = finished(handle)
        worker_id = worker.worker_id

    assert row.status is JobStatus.DONE
    assert row.result == "2024-05"
    assert contexts == [
        JobContext(
            job_id=handle.id,
            task_name=build_report.name,
            attempt=attempt,
            max_attempts=4,
            worker_id=worker_id,
            queue="reports",
        )
        for attempt in (1, 2)
    ]


# -- retries --


def test_retries_with_growing_backoff_until_max_attempts_then_fails(app: App) -> None:
    seen: list[tuple[int, datetime, datetime]] = []

    @app.task(bind=True, max_attempts=3, retry_backoff=0.2, retry_jitter=False)
    def always_fails(context: JobContext) -> None:
        assert context.job_id is not None
        run_at, clock = database_clock(app, context.job_id)
        seen.append((context.attempt, run_at, clock))
        raise ValueError(f"boom on attempt {context.attempt}")

    handle = always_fails.delay()
    with running_worker(app):
        row = finished(handle)

    assert row.status is JobStatus.FAILED
    assert row.attempts == 3
    assert row.last_error is not None
    assert "ValueError: boom on attempt 3" in row.last_error
    assert "Traceback (most recent call last)" in row.last_error
    assert "in always_fails" in row.last_error
    assert row.finished_at is not None
    assert [attempt for attempt, _, _ in seen] == [1, 2, 3]
    # The delay before attempt n+1 is run_at(n+1) - (database clock when attempt n raised):
    # backoff(n) = 0.2 * 2**(n-1) plus the time of writing the outcome, which a loaded
    # machine stretches without bound, so only the floor is the promise checked here (the
    # formula's exact values: tests/unit/test_retry.py).
    delays = [(seen[n + 1][1] - seen[n][2]).total_seconds() for n in range(len(seen) - 1)]
    assert delays[0] >= 0.2, delays
    assert delays[1] >= 0.4, delays
    for _, run_at, clock in seen:
        assert clock >= run_at, "an attempt never starts before its run_at"


def test_explicit_retry_reschedules_by_the_database_clock_and_a_later_attempt_finishes(
    app: App,
) -> None:
    seen: dict[int, tuple[datetime, datetime]] = {}

    @app.task(bind=True, max_attempts=3)
    def poll_export(context: JobContext) -> str:
        assert context.job_id is not None
        seen[context.attempt] = database_clock(app, context.job_id)
        if context.attempt == 1:
            raise Retry(delay=0.1)
        return "ready"

    handle = poll_export.delay()
    with running_worker(app):
        row = finished(handle)

    assert row.status is JobStatus.DONE
    assert row.attempts == 2
    assert row.result == "ready"
    raised_at = seen[1][1]
    rescheduled_for = seen[2][0]
    assert 0.1 <= (rescheduled_for - raised_at).total_seconds() < 0.2


def test_explicit_retry_with_no_attempts_left_fails_the_job(app: App) -> None:
    @app.task(max_attempts=1)
    def last_chance() -> None:
        raise Retry(delay=timedelta(milliseconds=100), reason="upstream busy")

    handle = last_chance.delay()
    with running_worker(app):
        row = finished(handle)

    assert row.status is JobStatus.FAILED
    assert row.attempts == 1
    assert row.last_error is not None
    assert "Retry: upstream busy" in row.last_error


def test_discard_fails_the_job_at_once(app: App) -> None:
    @app.task(max_attempts=5)
    def reject() -> None:
        raise Discard("customer 42 was deleted")

    handle = reject.delay()
    with running_worker(app):
        row = finished(handle)

    assert row.status is JobStatus.FAILED
    assert row.attempts == 1
    assert row.last_error is not None
    assert "Discard: customer 42 was deleted" in row.last_error


def test_an_exception_listed_in_dont_retry_fails_the_job_at_once(app: App) -> None:
    @app.task(max_attempts=5, dont_retry=(KeyError,))
    def lookup() -> None:
        raise KeyError("missing-sku")

    handle = lookup.delay()
    with running_worker(app):
        row = finished(handle)

    assert row.status is JobStatus.FAILED
    assert row.attempts == 1
    assert row.last_error is not None
    assert "KeyError: 'missing-sku'" in row.last_error


def test_a_result_that_is_not_json_fails_the_job_with_an_error_naming_the_task(
    app: App,
) -> None:
    @app.task(max_attempts=3)
    def tags() -> set[str]:
        return {"a", "b"}

    handle = tags.delay()
    with running_worker(app):
        row = finished(handle)

    assert row.status is JobStatus.FAILED
    assert row.attempts == 1, "a result that cannot be stored is not retried"
    assert row.result is None
    assert row.last_error is not None
    assert "PayloadNotSerializableError" in row.last_error
    assert f"the return value of task {tags.name!r} cannot be stored as JSON" in row.last_error
    assert "set is not JSON-serializable" in row.last_error


# -- order and queues --


def recorder(app: App, name: str = "record", **options: Any) -> tuple[Any, list[str]]:
    order: list[str] = []

    @app.task(name=name, **options)
    def record(label: str) -> None:
        order.append(label)

    return record, order


def test_runs_higher_priorities_first(app: App) -> None:
    record, order = recorder(app)
    handles = [record.apply_async([f"p{priority}"], priority=priority) for priority in (0, 10, 5)]

    with running_worker(app, concurrency=1):
        for handle in handles:
            finished(handle)

    assert order == ["p10", "p5", "p0"]


def test_runs_equal_priorities_by_run_at_then_id(app: App) -> None:
    record, order = recorder(app)
    past = datetime.now(timezone.utc) - timedelta(minutes=1)
    handles = [
        record.apply_async(["late, lower id"], eta=past),
        record.apply_async(["early"], eta=past - timedelta(seconds=30)),
        record.apply_async(["late, higher id"], eta=past),
    ]

    with running_worker(app, concurrency=1):
        for handle in handles:
            finished(handle)

    assert order == ["early", "late, lower id", "late, higher id"]


def test_a_worker_for_one_queue_never_runs_jobs_of_another(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    record_b, order_b = recorder(app, "record_b", queue="b")
    record_a, order_a = recorder(app, "record_a", queue="a")
    other_queue = [
        record_b.delay("b1"),
        record_b.delay("b2"),
        record_a.apply_async(["a-in-b"], queue="b"),
    ]

    with running_worker(app, queues=["a"]):
        finished(record_a.delay("a1"))
        finished(record_a.delay("a2"))

    assert order_a == ["a1", "a2"]
    assert order_b == []
    rows = app.get_jobs([handle.id for handle in other_queue])
    assert [(row.status, row.attempts, row.locked_by) for row in rows] == [
        (JobStatus.PENDING, 0, None)
    ] * 3


# -- wake-ups --


def test_an_idle_worker_starts_a_new_job_within_100_ms_of_its_enqueue(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    started: dict[int, float] = {}

    @app.task(bind=True)
    def ping(context: JobContext) -> None:
        assert context.job_id is not None
        started[context.job_id] = time.monotonic()

    latencies = []
    with running_worker(app, poll_interval=5.0) as worker:
        wait_until(lambda: is_listening(admin, app), message="the worker to LISTEN")
        for _ in range(5):
            enqueued = time.monotonic()
            handle = ping.delay()
            wait_until(lambda: handle.id in started, timeout=6.0)  # noqa: B023
            latencies.append(started[handle.id] - enqueued)
            finished(handle)
            wait_until(lambda: worker.running_jobs == 0)

    print(
        f"\nidle enqueue→start latency over {len(latencies)} jobs:"
        f" median {statistics.median(latencies) * 1000:.1f} ms,"
        f" max {max(latencies) * 1000:.1f} ms"
    )
    assert max(latencies) < 0.1, latencies


# -- several workers --


def test_two_workers_run_each_of_500_jobs_exactly_once(
    make_app: Callable[..., App], admin: psycopg.Connection[Any]
) -> None:
    first = make_app()
    second = make_app(schema=first.schema, migrate=False)
    executions: defaultdict[int, list[int | None]] = defaultdict(list)
    lock = threading.Lock()

    def count(context: JobContext, number: int) -> int:
        assert context.job_id is not None
        with lock:
            executions[context.job_id].append(context.worker_id)
        return number

    for each in (first, second):
        each.task(bind=True, name="tests.count")(count)

    with running_worker(first, concurrency=4), running_worker(second, concurrency=4):
        handles = first.tasks["tests.count"].delay_many([{"number": n} for n in range(500)])
        wait_until(
            lambda: (
                select(
                    admin, first, "SELECT count(*) FROM {schema}.all_jobs WHERE status = 'done'"
                )[0][0]
                == 500
            ),
            timeout=30,
            message="500 jobs done",
        )

    assert set(executions) == {handle.id for handle in handles}
    runs = Counter(len(workers) for workers in executions.values())
    assert runs == {1: 500}, f"executions per job: {runs}"
    by_worker = Counter(workers[0] for workers in executions.values())
    print(f"\njobs per worker: {dict(by_worker)}")
    assert len(by_worker) == 2, "both workers took part"


# -- schema --


def test_refuses_to_run_on_a_schema_that_is_not_migrated(make_app: Callable[..., App]) -> None:
    unmigrated = make_app(migrate=False)

    with pytest.raises(SchemaNotMigratedError, match="pgtasks migrate"):
        Worker(unmigrated).run()


def test_prefetch_claims_beyond_the_slots_and_runs_every_job_once(app: App) -> None:
    from pgtasks import Worker

    runs: list[int] = []
    lock = threading.Lock()

    @app.task
    def counted(number: int) -> None:
        with lock:
            runs.append(number)

    counted.delay_many([{"number": n} for n in range(200)])
    with running_worker(app, concurrency=2, prefetch=4) as worker:
        assert isinstance(worker, Worker) and worker.prefetch == 4
        wait_until(lambda: len(runs) == 200, timeout=30, message="every job to run")
    assert sorted(runs) == list(range(200))


def test_prefetch_must_be_a_non_negative_int(app: App) -> None:
    from pgtasks import ConfigurationError, Worker

    with pytest.raises(ConfigurationError, match="prefetch"):
        Worker(app, prefetch=-1)
