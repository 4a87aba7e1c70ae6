"""An app of two stores on two PostgreSQL clusters (`.ci/run` and `dev.py test-servers`
start the second on 127.0.0.2): routing, ids, a worker per store, and isolation — one
cluster stopped with ``pg_ctl stop -m immediate`` for 30 s while the other store's workers
keep their rate, and every job of the stopped store finishes after its restart."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from benchmarks.clusters import Cluster, pg15_available, start_clusters
from pgtasks import App, DatabaseError, Store
from tests.support.environment import ROOT, pgtasks_command, pgtasks_env
from tests.support.inprocess import running_worker
from tests.support.schemas import new_schema_name
from tests.support.servers import START_SERVERS
from tests.support.waiting import wait_until

#: Seconds the stopped cluster stays down, and of the windows the rates are measured in.
OUTAGE = 30.0
BASELINE = 10.0
#: Jobs per second each store's producer enqueues.
RATE = 60.0


@pytest.fixture(scope="module")
def second_dsn() -> str:
    value = os.environ.get("PGTASKS_TEST_SECOND_DSN")
    if not value:
        pytest.skip(f"PGTASKS_TEST_SECOND_DSN is not set (no second cluster): {START_SERVERS}")
    return value


def drop(dsn: str, schema: str) -> None:
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    except psycopg.OperationalError:
        pass


def two_store_app(first: str, second: str, schemas: dict[str, str], **options: Any) -> App:
    return App(
        stores={
            "default": Store(first, schema=schemas["default"]),
            "bulk": Store(second, schema=schemas["bulk"]),
        },
        routes={"emails": "bulk"},
        **options,
    )


def test_two_stores_on_two_clusters(dsn: str, second_dsn: str) -> None:
    server = os.environ.get("PGTASKS_TEST_DSN", dsn)
    schemas = {"default": new_schema_name(), "bulk": new_schema_name()}
    app = two_store_app(server, second_dsn, schemas, connect_timeout=3.0)
    try:
        app.migrate()

        @app.task(name="two.double")
        def double(n: int) -> int:
            return n * 2

        @app.task(name="two.mail", queue="emails")
        def mail(n: int) -> int:
            return n + 1

        here, there = double.delay(2), mail.delay(3)
        assert (here.id >> 48, there.id >> 48) == (0, 1)
        with psycopg.connect(second_dsn) as conn:
            query = sql.SQL("SELECT id FROM {}.jobs").format(sql.Identifier(schemas["bulk"]))
            assert [row[0] for row in conn.execute(query)] == [there.id]
        with running_worker(app, store="bulk"), running_worker(app, store="default"):
            assert app.get_job(there.id).get(timeout=15) == 4
            assert here.get(timeout=15) == 4
        # Each finished job is in its own store's history, on its own cluster.
        with psycopg.connect(second_dsn) as conn:
            query = sql.SQL("SELECT id FROM {}.jobs_history").format(
                sql.Identifier(schemas["bulk"])
            )
            assert [row[0] for row in conn.execute(query)] == [there.id]
        assert app.get_job(there.id).status() == "done"
    finally:
        app.close()
        drop(server, schemas["default"])
        drop(second_dsn, schemas["bulk"])


@pytest.fixture
def crashing_cluster(tmp_path: Path, second_dsn: str) -> Iterator[Cluster]:
    """A cluster of this test on 127.0.0.3 (stopped and restarted by it)."""
    if not pg15_available():
        pytest.skip("Debian's PostgreSQL 15 is not installed (apt-get install postgresql-15)")
    (cluster,) = start_clusters(tmp_path / "clusters", ["127.0.0.3"], 54430)
    yield cluster
    cluster.stop()


class Producer(threading.Thread):
    """Enqueues ``RATE`` jobs per second of ``task`` until stopped; keeps the handles of the
    jobs enqueued and counts the enqueues refused (a store that is down)."""

    def __init__(self, task: Any) -> None:
        super().__init__(daemon=True)
        self.task = task
        self.handles: list[Any] = []
        self.refused = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        started, sent = time.monotonic(), 0
        while not self.stopping.is_set():
            try:
                self.handles.append(self.task.delay(sent))
            except DatabaseError:
                self.refused += 1
            sent += 1
            pause = started + sent / RATE - time.monotonic()
            if pause > 0:
                self.stopping.wait(pause)


def backlog(dsn: str, schema: str) -> int:
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        query = sql.SQL("SELECT count(*) FROM {}.jobs WHERE status IN ('pending', 'running')")
        row = conn.execute(query.format(sql.Identifier(schema))).fetchone()
        return int(row[0]) if row else 0


def done_between(dsn: str, schema: str, start: float, end: float) -> int:
    """Jobs of ``schema`` finished done between two Unix times (database clock)."""
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        query = sql.SQL(
            "SELECT count(*) FROM {}.all_jobs WHERE status = 'done'"
            " AND finished_at >= to_timestamp(%s) AND finished_at < to_timestamp(%s)"
        ).format(sql.Identifier(schema))
        return int(conn.execute(query, (start, end)).fetchone()[0])  # type: ignore[index]


@pytest.mark.timeout(300)  # 10 s baseline + 30 s outage + drain, and the cluster's stop
def test_a_stopped_cluster_stalls_only_its_store(
    second_dsn: str, crashing_cluster: Cluster, tmp_path: Path
) -> None:
    schemas = {"default": new_schema_name(), "bulk": new_schema_name()}
    app = two_store_app(second_dsn, crashing_cluster.dsn, schemas, connect_timeout=3.0)
    workers: list[subprocess.Popen[bytes]] = []
    producers: list[Producer] = []
    try:
        app.migrate()

        @app.task(name="stores_app.double")
        def double(n: int) -> int:
            return n * 2

        @app.task(name="stores_app.mail", queue="emails")
        def mail(n: int) -> int:
            return n + 1

        env = pgtasks_env(second_dsn, schemas["default"])
        env.pop("PGTASKS_DSN")
        env["PGTASKS_STORES"] = json.dumps(
            {
                "default": {"dsn": second_dsn, "schema": schemas["default"]},
                "bulk": {"dsn": crashing_cluster.dsn, "schema": schemas["bulk"]},
            }
        )
        env["PGTASKS_ROUTES"] = '{"emails": "bulk"}'
        for store in ("default", "bulk"):  # default settings: the promise as users meet it
            command = pgtasks_command("worker", "-A", "tests.apps.stores_app:app", "--store", store)
            with (tmp_path / f"worker-{store}.log").open("wb") as log:
                workers.append(
                    subprocess.Popen(
                        command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
                    )
                )
        producers = [Producer(double), Producer(mail)]
        for producer in producers:
            producer.start()
        # Steady state: both stores' workers keep up (no backlog left from their start).
        wait_until(
            lambda: (
                all(len(producer.handles) > RATE for producer in producers)
                and backlog(second_dsn, schemas["default"]) < RATE / 4
                and backlog(crashing_cluster.dsn, schemas["bulk"]) < RATE / 4
            ),
            timeout=60,
            interval=0.5,
            message="both stores' workers to keep up with their producers",
        )
        time.sleep(BASELINE)  # the baseline window
        crash_at = time.time()
        crashing_cluster.crash()
        time.sleep(OUTAGE)  # the outage the test is about
        restart_at = time.time()
        crashing_cluster.restart()
        baseline = done_between(second_dsn, schemas["default"], crash_at - BASELINE, crash_at)
        during = done_between(second_dsn, schemas["default"], crash_at, restart_at)
        baseline_rate, outage_rate = baseline / BASELINE, during / (restart_at - crash_at)
        print(
            f"store default: {baseline_rate:.1f} jobs/s before, {outage_rate:.1f} jobs/s while"
            f" store bulk was down ({outage_rate / baseline_rate:.0%}); bulk enqueues refused"
            f" meanwhile: {producers[1].refused}"
        )
        assert outage_rate >= 0.9 * baseline_rate
        for producer in producers:
            producer.stopping.set()
            producer.join(30)
        stopped_store = producers[1].handles
        assert stopped_store
        # Every job the stopped store accepted finishes after its restart (those running
        # at the crash are rescued once their lease runs out).
        started = time.monotonic()
        wait_until(
            lambda: {row.status for row in app.get_jobs([h.id for h in stopped_store])} == {"done"},
            timeout=180,
            interval=0.5,
            message="every job of the stopped store to finish after its restart",
        )
        print(
            f"store bulk: all {len(stopped_store)} accepted jobs done"
            f" {time.monotonic() - started:.1f} s after its restart"
        )
        assert len(app.get_jobs([h.id for h in stopped_store])) == len(stopped_store)
    finally:
        for producer in producers:
            producer.stopping.set()
        for worker in workers:
            worker.terminate()
        for worker in workers:
            try:
                worker.wait(40)
            except subprocess.TimeoutExpired:
                worker.kill()
        app.close()
        drop(second_dsn, schemas["default"])


def test_metrics_read_both_clusters_and_a_crashed_one_is_down(
    second_dsn: str, crashing_cluster: Cluster
) -> None:
    """A worker's metrics sample both clusters labelled by store; while one is stopped
    (``pg_ctl stop -m immediate``) it is ``pgtasks_store_up 0`` with its failed samples
    counted and the other store's samples go on; after its restart it is up again."""
    pytest.importorskip("prometheus_client")
    from pgtasks import WorkerMetrics
    from tests.support.scrape import scrape_until, value

    schemas = {"default": new_schema_name(), "bulk": new_schema_name()}
    app = two_store_app(second_dsn, crashing_cluster.dsn, schemas, connect_timeout=3.0)
    metrics = WorkerMetrics(queue_depth_interval=0.2)
    metrics.serve(0)
    try:
        app.migrate()

        @app.task(name="two.mail", queue="emails")
        def mail(n: int) -> int:
            return n + 1

        assert app.pause_queue("emails")
        for n in range(4):
            mail.delay(n)
        with running_worker(app, store="default", observers=[metrics]):
            scrape_until(
                metrics,
                lambda s: (
                    value(s, "pgtasks_queue_depth", store="bulk", queue="emails") == 4
                    and value(s, "pgtasks_store_up", store="default") == 1
                ),
                "the other cluster's queue depth, both stores up",
            )
            crashing_cluster.crash()
            down = scrape_until(
                metrics,
                lambda s: value(s, "pgtasks_store_up", store="bulk") == 0,
                "the stopped cluster's store down",
            )
            errors = value(down, "pgtasks_store_sample_errors_total", store="bulk") or 0
            stamp = value(down, "pgtasks_queue_depth_sampled_timestamp_seconds", store="default")
            scrape_until(
                metrics,
                lambda s: (
                    (
                        value(s, "pgtasks_queue_depth_sampled_timestamp_seconds", store="default")
                        or 0
                    )
                    > (stamp or 0)
                    and (value(s, "pgtasks_store_sample_errors_total", store="bulk") or 0) > errors
                    and value(s, "pgtasks_store_up", store="default") == 1
                ),
                "the default store sampled on while bulk's samples fail",
            )
            crashing_cluster.restart()
            scrape_until(
                metrics,
                lambda s: (
                    value(s, "pgtasks_store_up", store="bulk") == 1
                    and value(s, "pgtasks_queue_depth", store="bulk", queue="emails") == 4
                ),
                "the restarted store up again with its jobs",
            )
    finally:
        metrics.close()
        app.close()
        drop(second_dsn, schemas["default"])
