"""A worker's Prometheus metrics read every store of its app, concurrently, labelled by
store; a store that is down is ``pgtasks_store_up{store} 0`` with its failed samples
counted, while the other stores' series keep being sampled."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import pytest

from pgtasks import App
from tests.support.inprocess import running_worker
from tests.support.schemas import SchemaAdmin
from tests.support.scrape import scrape_until, value

pytest.importorskip("prometheus_client")


from pgtasks import WorkerMetrics


@pytest.fixture
def metrics() -> Iterator[WorkerMetrics]:
    worker_metrics = WorkerMetrics(queue_depth_interval=0.1)
    worker_metrics.serve(0)
    yield worker_metrics
    worker_metrics.close()


def add_tasks(app: App) -> dict[str, object]:
    @app.task(name="m.work")
    def work(n: int) -> int:
        return n

    @app.task(name="m.mail", queue="emails")
    def mail(n: int) -> int:
        return n

    return {"work": work, "mail": mail}


def test_every_store_is_sampled_and_labelled_by_store(
    make_stores_app: Callable[..., App], metrics: WorkerMetrics
) -> None:
    app = make_stores_app(routes={"emails": "bulk"})
    tasks = add_tasks(app)
    # Paused queues: the jobs stay pending and due, in the store each queue routes to.
    assert app.pause_queue("default") and app.pause_queue("emails")
    for n in range(2):
        tasks["work"].delay(n)  # type: ignore[attr-defined]
    for n in range(3):
        tasks["mail"].delay(n)  # type: ignore[attr-defined]
    with running_worker(app, store="default", observers=[metrics]):  # one store's worker
        scraped = scrape_until(
            metrics,
            lambda s: (
                value(s, "pgtasks_queue_depth", store="default", queue="default") == 2
                and value(s, "pgtasks_queue_depth", store="bulk", queue="emails") == 3
                and all(
                    value(s, "pgtasks_schema_events_total", store=name, event="rescued") is not None
                    for name in ("default", "bulk")
                )
            ),
            "the depths and counters of both stores",
        )
    for store in ("default", "bulk"):
        assert value(scraped, "pgtasks_store_up", store=store) == 1
        assert value(scraped, "pgtasks_store_sample_errors_total", store=store) == 0
        assert (
            value(scraped, "pgtasks_queue_depth_sampled_timestamp_seconds", store=store) or 0
        ) > 0
        assert value(scraped, "pgtasks_schema_events_total", store=store, event="rescued") == 0
    assert value(scraped, "pgtasks_queue_depth", store="default", queue="emails") is None
    for store, queue in (("default", "default"), ("bulk", "emails")):
        age = value(scraped, "pgtasks_queue_oldest_due_age_seconds", store=store, queue=queue)
        assert age is not None and age > 0, (store, queue, age)
    # The worker of store default is registered there; none serves bulk.
    assert value(scraped, "pgtasks_store_workers", store="default", state="live") == 1
    assert value(scraped, "pgtasks_store_workers", store="bulk", state="live") == 0
    assert value(scraped, "pgtasks_store_workers", store="bulk", state="silent") == 0
    info = [labels for (name, labels) in scraped if name == "pgtasks_worker_info"]
    assert len(info) == 1 and ("store", "default") in info[0]


def test_a_worker_of_some_queues_samples_them_in_their_store(
    make_stores_app: Callable[..., App], metrics: WorkerMetrics
) -> None:
    app = make_stores_app(routes={"emails": "bulk"})
    add_tasks(app)
    with running_worker(app, store="bulk", queues=["emails"], observers=[metrics]):
        scraped = scrape_until(
            metrics,
            lambda s: (
                value(s, "pgtasks_store_up", store="default") == 1
                and value(s, "pgtasks_queue_depth", store="bulk", queue="emails") == 0
            ),
            "an empty emails queue in bulk and the default store up",
        )
    assert value(scraped, "pgtasks_queue_depth", store="default", queue="emails") is None
    empty = value(scraped, "pgtasks_queue_oldest_due_age_seconds", store="bulk", queue="emails")
    assert empty == 0


def refused_dsn() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"postgresql://pgtasks@127.0.0.1:{port}/nowhere"


def test_a_store_that_is_down_is_its_own_signal_and_the_others_answer(
    make_stores_app: Callable[..., App], schema_admin: SchemaAdmin, metrics: WorkerMetrics
) -> None:
    app = make_stores_app(dsns={"bulk": refused_dsn()}, migrate=False)
    schema_admin.create_migrated(app.schemas["default"])  # type: ignore[attr-defined]
    tasks = add_tasks(app)
    assert app.pause_queue("default")
    tasks["work"].delay(1)  # type: ignore[attr-defined]
    with running_worker(app, store="default", observers=[metrics]):
        first = scrape_until(
            metrics,
            lambda s: (
                (value(s, "pgtasks_store_sample_errors_total", store="bulk") or 0) >= 2
                and value(s, "pgtasks_queue_depth", store="default", queue="default") == 1
            ),
            "the down store counted twice, the default store sampled",
        )
        assert value(first, "pgtasks_store_up", store="bulk") == 0
        assert value(first, "pgtasks_store_up", store="default") == 1
        assert value(first, "pgtasks_queue_depth_sampled_timestamp_seconds", store="bulk") is None
        stamp = value(first, "pgtasks_queue_depth_sampled_timestamp_seconds", store="default")
        # The default store keeps being sampled while bulk stays down.
        scrape_until(
            metrics,
            lambda s: (
                (value(s, "pgtasks_queue_depth_sampled_timestamp_seconds", store="default") or 0)
                > (stamp or 0)
                and value(s, "pgtasks_store_up", store="bulk") == 0
            ),
            "a later sample of the default store",
        )
