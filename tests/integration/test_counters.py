"""The counters of exercised guarantees (pgtasks._counters, migration 0014), each caused by
the event it counts on a real Worker and a real PostgreSQL, read back where operators
read them: ``collect_stats`` (``pgtasks stats --json``), ``Worker.counters`` and the
Prometheus series. The process-level faults (SIGKILL, SIGSTOP) are in
tests/faults/test_counters.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pgtasks import App, JobContext, JobHandle, LeaseLostError, WorkerMetrics
from pgtasks._counters import COUNTER_NAMES, Tally, every_counter
from tests.support.inprocess import Gates, execute, finished, running_worker, select
from tests.support.waiting import wait_until


def stored(app: App) -> dict[str, int]:
    """Every counter's total in the database (what ``pgtasks stats --json`` shows)."""
    return app.admin.counters()


@pytest.fixture
def gates() -> Iterator[Gates]:
    made = Gates()
    yield made
    made.open_all()


def test_every_counter_is_zero_on_a_fresh_schema_and_listed_by_stats(app: App) -> None:
    with app.connection() as conn:
        stats = app.admin.collect_stats(conn)

    assert stats.counters == dict.fromkeys(COUNTER_NAMES, 0)
    assert stats.as_json()["counters"] == dict.fromkeys(COUNTER_NAMES, 0)


# -- enqueues answered by an existing job ----------------------------------------------------------
def test_an_enqueue_answered_by_an_existing_key_is_counted_once_in_the_database(app: App) -> None:
    @app.task
    def welcome(user: int) -> None: ...

    first = welcome.apply_async((1,), idempotency_key="welcome:1")
    again = [welcome.apply_async((1,), idempotency_key="welcome:1") for _ in range(2)]
    other = welcome.apply_async((2,), idempotency_key="welcome:2")

    assert not first.existed and not other.existed
    assert [handle.existed for handle in again] == [True, True]
    assert stored(app)["enqueues_deduplicated"] == 2
    assert app.counters.total("enqueues_deduplicated") == 2


def test_keys_repeated_within_one_batch_and_scoped_keys_are_counted(app: App) -> None:
    @app.task
    def refresh(user: int) -> None: ...

    @app.task(unique_while="active", unique_key=lambda user: f"sync:{user}")
    def sync(user: int) -> None: ...

    specs = [refresh.build_spec((user,), idempotency_key=f"refresh:{user}") for user in (1, 1, 2)]
    batch = app.enqueue_many(specs)
    again = app.enqueue_many([refresh.build_spec((2,), idempotency_key="refresh:2")])
    scoped = sync.delay_many([{"user": 7}, {"user": 7}, {"user": 8}])
    scoped_again = sync.delay(8)

    assert [handle.existed for handle in batch] == [False, True, False]
    assert again[0].existed
    assert [handle.existed for handle in scoped] == [False, True, False]
    assert scoped_again.existed
    # One repeated key in each batch, one existing key in each later enqueue: 4.
    assert stored(app)["enqueues_deduplicated"] == 4
    assert app.counters.total("enqueues_deduplicated") == 4


def test_async_enqueues_answered_by_an_existing_job_are_counted(app: App) -> None:
    @app.task
    def report(day: str) -> None: ...

    async def enqueue() -> tuple[JobHandle[Any], list[JobHandle[Any]]]:
        await report.aapply_async(("mon",), idempotency_key="report:mon")
        again = await report.aapply_async(("mon",), idempotency_key="report:mon")
        repeated = await app.aenqueue_many(
            [report.build_spec(("tue",), idempotency_key="report:tue") for _ in range(3)]
        )
        await app.aclose()
        return again, repeated

    again, repeated = asyncio.run(enqueue())

    assert again.existed
    assert [handle.existed for handle in repeated] == [False, True, True]
    assert stored(app)["enqueues_deduplicated"] == 3


def test_a_deduplicated_enqueue_rolled_back_with_its_transaction_is_not_counted(
    app: App,
) -> None:
    @app.task
    def invoice(order: int) -> None: ...

    invoice.apply_async((1,), idempotency_key="invoice:1")
    with psycopg.connect(app.dsn) as conn:
        with conn.transaction(force_rollback=True):
            assert invoice.apply_async((1,), idempotency_key="invoice:1", connection=conn).existed
            assert invoice.apply_async((2,), idempotency_key="invoice:1", connection=conn).existed
        with conn.transaction():
            assert invoice.apply_async((3,), idempotency_key="invoice:1", connection=conn).existed

    assert stored(app)["enqueues_deduplicated"] == 1


def test_an_enqueue_without_a_conflict_counts_nothing(app: App) -> None:
    @app.task
    def note(n: int) -> None: ...

    note.delay(1)
    note.apply_async((2,), idempotency_key="note:2")
    note.delay_many([{"n": n} for n in range(100)])  # the COPY path
    note.delay_many([{"n": n} for n in range(3)])

    assert stored(app) == dict.fromkeys(COUNTER_NAMES, 0)
    assert app.counters.totals() == {}


# -- the worker's own counts -----------------------------------------------------------------------
def test_jobs_released_at_shutdown_are_counted_and_stored_before_deregistering(
    app: App, gates: Gates
) -> None:
    gate = gates()
    started = threading.Semaphore(0)

    @app.task
    def hold(n: int) -> None:
        started.release()
        gate.wait(30)

    handles = [hold.delay(n) for n in range(3)]
    with running_worker(app, concurrency=2, prefetch=1) as worker:
        for _ in range(2):
            assert started.acquire(timeout=10)
        wait_until(lambda: worker.running_jobs == 3, message="2 running and 1 prefetched job")
        worker.stop(timeout=0)

    assert worker.counters == {"released_at_shutdown": 3}
    assert stored(app)["released_at_shutdown"] == 3
    assert [str(handle.status()) for handle in handles] == ["pending"] * 3


def test_a_job_of_an_unknown_task_is_counted_where_a_worker_releases_it(app: App) -> None:
    """Workers claim only the tasks they know: a job no worker knows is never met, so
    never counted (stats names it instead). A task registered after a worker's forked
    process-pool children started is known to the worker and claimed, but its child
    cannot run it: the job is released to pending, not failed, and counted there."""
    with App(app.dsn, schema=app.schema) as producer:

        @producer.task(name="deployed.elsewhere")
        def elsewhere() -> None: ...

        never_claimed = elsewhere.delay()

    @app.task(executor="process")
    def known() -> None: ...

    with running_worker(app, processes=1, process_start_method="fork") as worker:
        finished(known.delay())

        @app.task(name="registered.late", executor="process")
        def late() -> None: ...

        released = late.delay()
        row = wait_until(
            lambda: (job := released.fetch()).attempts == 1 and job.status == "pending" and job,
            message="the late task's job released by the child that lacks it",
        )
        wait_until(
            lambda: stored(app)["unknown_task_jobs"] == 1,
            message="the count stored with a heartbeat",
        )
        counters = dict(worker.counters)

    assert counters == {"unknown_task_jobs": 1}
    assert row.last_error is not None and "no task named 'registered.late'" in row.last_error
    assert never_claimed.fetch().attempts == 0


def test_a_lost_lease_is_counted_once_per_attempt_and_each_refused_write_once(
    app: App, gates: Gates
) -> None:
    """The lease is taken away while the task runs (as a rescue and a new claim would):
    the task's progress update and its outcome are both refused by the fence; the lease
    counts once."""
    taken, proceed = gates(), gates()
    refusals: list[str] = []

    @app.task(bind=True)
    def stalled(context: JobContext) -> str:
        taken.set()
        proceed.wait(30)
        try:
            context.set_progress(1, 2)
        except LeaseLostError as error:
            refusals.append(str(error))
        return "late"

    metrics = WorkerMetrics(queue_depth_interval=0.05, process_metrics=False)
    handle = stalled.delay()
    with running_worker(app, observers=[metrics]) as worker:
        assert taken.wait(10)
        # Another owner's lease: the attempt number moves on, as a re-claim would move it.
        execute_lease_theft(app, handle.id)
        proceed.set()
        wait_until(
            lambda: worker.counters.get("fenced_writes_refused") == 2,
            message="the progress update and the outcome refused",
        )
        scraped = families(metrics)

    assert len(refusals) == 1
    assert worker.counters == {"lease_lost": 1, "fenced_writes_refused": 2}
    assert stored(app)["lease_lost"] == 1
    assert stored(app)["fenced_writes_refused"] == 2
    assert scraped["pgtasks_leases_lost_total"] == 1
    assert scraped["pgtasks_fenced_writes_refused_total"] == 2
    with psycopg.connect(app.dsn) as conn:
        rows = select(conn, app, "SELECT result FROM {schema}.all_jobs WHERE id = %s", [handle.id])
    assert rows == [(None,)]


def execute_lease_theft(app: App, job_id: int) -> None:
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        execute(
            conn,
            app,
            "UPDATE {schema}.jobs SET attempts = attempts + 1, max_attempts = max_attempts + 1"
            " WHERE id = %s AND status = 'running'",
            [job_id],
        )


def families(metrics: WorkerMetrics) -> dict[str, float]:
    """Unlabelled samples of the metrics' registry, by sample name."""
    from prometheus_client import generate_latest

    text = generate_latest(metrics.registry).decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }


def test_prometheus_serves_the_worker_counts_and_the_schema_totals(app: App) -> None:
    @app.task
    def keyed(n: int) -> int:
        if n == 0:
            # An enqueue of this process answered by an existing job.
            keyed.apply_async((1,), idempotency_key="keyed:1")
        return n

    # Another process's enqueues (an App of their own): counted in the database only.
    with App(app.dsn, schema=app.schema) as producer:
        elsewhere = producer.task(name=keyed.name)(lambda n: n)
        elsewhere.apply_async((1,), idempotency_key="keyed:1")
        elsewhere.apply_async((1,), idempotency_key="keyed:1")
    metrics = WorkerMetrics(queue_depth_interval=0.05, process_metrics=False)
    with running_worker(app, observers=[metrics]):
        finished(keyed.delay(0))

        def both_counted() -> bool:
            text = families(metrics)
            return (
                text.get("pgtasks_enqueues_deduplicated_total") == 1
                and schema_total(metrics, "enqueues_deduplicated") == 2
            )

        wait_until(both_counted, message="the process count and the sampled schema total")

    scraped = families(metrics)
    for series in (
        "pgtasks_leases_lost_total",
        "pgtasks_fenced_writes_refused_total",
        "pgtasks_jobs_rescued_total",
        "pgtasks_jobs_released_total",
        "pgtasks_unknown_task_jobs_total",
    ):
        assert scraped[series] == 0, series


def schema_total(metrics: WorkerMetrics, event: str) -> float | None:
    from prometheus_client import generate_latest

    text = generate_latest(metrics.registry).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "pgtasks_schema_events_total" and sample.labels == {
                "store": "default",
                "event": event,
            }:
                return sample.value
    return None


def test_the_pruner_folds_the_counters_without_changing_their_totals(app: App) -> None:
    with app.connection() as conn:
        for _ in range(5):
            app.queries.add_counters(conn, {"lease_lost": 1, "rescued": 2})
        app.queries.add_counters(conn, {"unknown_task_jobs": 0})
        before = app.queries.get_counters(conn)
        app.queries.fold_counters(conn)
        after = app.queries.get_counters(conn)
        rows = select(conn, app, "SELECT name, value FROM {schema}.counters ORDER BY name")

    assert before == after == {"lease_lost": 5, "rescued": 10}
    assert rows == [("lease_lost", 5), ("rescued", 10)]


# -- the tally -------------------------------------------------------------------------------------
def test_the_tally_hands_over_what_was_not_stored_and_takes_back_what_failed() -> None:
    tally = Tally()
    tally.add("lease_lost")
    tally.add("rescued", 3, store=False)
    tally.add("fenced_writes_refused", 0)

    handed = tally.unstored()
    tally.give_back(handed)
    tally.add("lease_lost", 2)

    assert handed == {"lease_lost": 1}
    assert tally.unstored() == {"lease_lost": 3}
    assert tally.unstored() == {}
    assert tally.totals() == {"lease_lost": 3, "rescued": 3}
    assert every_counter({"rescued": 2, "newer": 1}) == {
        **dict.fromkeys(COUNTER_NAMES, 0),
        "rescued": 2,
        "newer": 1,
    }
