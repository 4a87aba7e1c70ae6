"""Enqueue paths under contention and odd input, run by real workers (scenarios 15, 16,
18, 19, 20 and 21 of the fault suite; see docs/guarantees.md)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from psycopg import conninfo, sql

from pgtasks import App, ConfigurationError, PayloadTooLargeError
from pgtasks._payload import DEFAULT_MAX_PAYLOAD_BYTES
from tests.apps.fault_app import EVERY_SECOND
from tests.support.faults import FaultEnv, prepare_env
from tests.support.probe import assert_invariants, wait_started, wait_status
from tests.support.processes import RESCUE_BOUND, Processes
from tests.support.schemas import drop_schema
from tests.support.servers import terminate_backends
from tests.support.waiting import sleep_past, wait_until

PASSWORD = "S3cr3t!"


def test_concurrent_enqueues_of_one_key_make_one_job_despite_late_rollbacks(
    env: FaultEnv,
) -> None:
    key = "welcome:42"
    barrier = threading.Barrier(16)
    hold = 0.5  # seconds a rolling-back transaction keeps its uncommitted insert

    def enqueue(index: int) -> tuple[str, int, float]:
        with psycopg.connect(env.dsn) as conn:
            barrier.wait(10)
            started = time.monotonic()
            job_id = env.tasks.noop.apply_async(idempotency_key=key, connection=conn).id
            if index % 2:
                sleep_past(hold)
                conn.rollback()
                return "rolled back", job_id, time.monotonic() - started
            conn.commit()
            return "committed", job_id, time.monotonic() - started

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(enqueue, range(16)))
    committed = [(job_id, took) for kind, job_id, took in results if kind == "committed"]
    rows = env.probe.rows("SELECT id FROM {schema}.all_jobs WHERE idempotency_key = %s", (key,))
    assert len(rows) == 1
    assert {job_id for job_id, _ in committed} == {rows[0]["id"]}
    slowest = max(took for _, took in committed)
    print(f"\n[fault 15] slowest committed enqueue: {slowest:.2f} s (rollbacks held {hold} s)")
    # A caller can wait for an uncommitted insert of its key only while that transaction
    # is open (the unique index must learn whether the key will exist): at most about the
    # time the rollbacks held it, never longer, and never an error.
    assert slowest < hold * 8 + 2.0


def test_a_rolled_back_transactional_enqueue_never_runs_even_after_a_wake_up(
    env: FaultEnv,
) -> None:
    worker = env.worker("--concurrency=2")
    with psycopg.connect(env.dsn) as conn:
        ghost = env.tasks.noop.apply_async(connection=conn)
        # Wake the worker (a committed enqueue notifies it) while the ghost row exists.
        woken = env.tasks.noop.delay()
        wait_status(env.probe, woken.id, "done")
        conn.rollback()
    after = env.tasks.noop.delay()
    wait_status(env.probe, after.id, "done")
    assert env.probe.rows(
        "SELECT count(*) AS n FROM {schema}.all_jobs WHERE id = %s", (ghost.id,)
    ) == [{"n": 0}]
    assert env.probe.executions(ghost.id) == []
    assert worker.alive()
    assert_invariants(env.probe, [woken.id, after.id])


def test_ids_past_two_to_the_31_work_for_enqueue_claim_finish_rescue_and_beat(
    env: FaultEnv,
) -> None:
    start = 2**31 + 10
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        for table in ("jobs", "workers", "executions", "periodic", "worker_history"):
            identity = conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass"
                " AND attidentity <> '' AND NOT attisdropped",
                (f'"{env.schema}".{table}',),
            ).fetchall()
            for (column,) in identity:
                conn.execute(
                    sql.SQL("ALTER TABLE {} ALTER COLUMN {} RESTART WITH {}").format(
                        sql.Identifier(env.schema, table), sql.Identifier(column), start
                    )
                )
    workers = env.workers(2, "--concurrency=2")
    assert min(worker.worker_id() for worker in workers) > 2**31
    quick = env.tasks.noop.delay()
    assert quick.id > 2**31
    wait_status(env.probe, quick.id, "done")

    slow = env.tasks.sleep.delay(30.0, retry_seconds=0.1)
    first = wait_started(env.probe, slow.id)
    victim = next(worker for worker in workers if worker.pid == first["pid"])
    victim.send(signal.SIGKILL)
    wait_started(env.probe, slow.id, attempt=2, timeout=RESCUE_BOUND + 2)
    wait_status(env.probe, slow.id, "done")

    beat = env.beat()
    wait_until(
        lambda: (
            env.probe.rows(
                "SELECT count(*) AS n FROM {schema}.all_jobs"
                " WHERE starts_with(idempotency_key, %s) AND status = 'done'",
                (f"pgtasks.periodic:{EVERY_SECOND}@",),
            )[0]["n"]
            >= 2
        ),
        timeout=15,
        message="two periodic jobs done",
    )
    beat.send(signal.SIGTERM)
    assert beat.wait_exit(10) == 0
    periodic = env.probe.rows("SELECT last_job_id FROM {schema}.periodic")
    assert periodic and periodic[0]["last_job_id"] > 2**31
    ids = [row["id"] for row in env.probe.rows("SELECT id FROM {schema}.all_jobs")]
    for worker in workers:
        if worker.alive():
            worker.send(signal.SIGTERM)
            assert worker.wait_exit(10) == 0
    assert_invariants(env.probe, ids)


def test_a_one_mebibyte_payload_runs_and_one_over_the_cap_is_rejected(env: FaultEnv) -> None:
    env.worker("--concurrency=2")
    overhead = len('[""]') + len("{}")
    blob = "x" * (DEFAULT_MAX_PAYLOAD_BYTES - overhead)
    job = env.tasks.payload.delay(blob)
    row = wait_status(env.probe, job.id, "done", timeout=20)
    assert row["result"] == len(blob)
    with pytest.raises(PayloadTooLargeError, match="over the"):
        env.tasks.payload.delay(blob + "xx")
    assert env.probe.status_counts() == {"done": 1}
    assert_invariants(env.probe, [job.id])


def test_the_dsn_password_appears_in_no_log_exception_or_stored_error(env: FaultEnv) -> None:
    params = conninfo.conninfo_to_dict(env.dsn)
    if params.get("password"):
        pytest.skip("the test server's DSN has a password of its own")
    secret_dsn = conninfo.make_conninfo(env.dsn, password=PASSWORD)  # trust auth ignores it
    worker = env.worker("--concurrency=2", dsn=secret_dsn)
    handles = env.tasks.sleep.delay_many([{"seconds": 0.05}] * 40)
    for _ in range(3):
        wait_until(
            lambda: terminate_backends(env.dsn, f"pgtasks worker %:{worker.pid}") > 0,
            message="worker sessions to terminate",
        )
    worker.wait_for_log("database error")
    wait_until(lambda: env.probe.status_counts().get("done") == 40, timeout=30)

    errors: list[str] = []
    nowhere = conninfo.make_conninfo("postgresql://pgtasks@127.0.0.1:1/pgtasks", password=PASSWORD)
    with App(nowhere, schema=env.schema, connect_timeout=1, connect_attempts=1) as app:
        for call in (app.migrate, lambda: app.tasks and None, app.check_schema):
            try:
                call()
            except Exception as error:
                errors.append(f"{type(error).__name__}: {error!r} {error}")
    assert errors
    worker.send(signal.SIGTERM)
    assert worker.wait_exit(10) == 0
    stored = env.probe.rows(
        "SELECT coalesce(string_agg(last_error, ''), '') AS e FROM {schema}.all_jobs"
    )
    for text in [worker.log(), stored[0]["e"], *errors]:
        assert PASSWORD not in text and "S3cr3t" not in text, text
    assert_invariants(env.probe, [handle.id for handle in handles])


@pytest.mark.parametrize(
    "schema", ['x"; DROP TABLE jobs; --', "a b", "a;b", "pg_x", "1abc", "", "a" * 64, "jobs'"]
)
def test_schema_names_with_sql_in_them_are_rejected_at_configuration(schema: str) -> None:
    with pytest.raises(ConfigurationError, match="schema"):
        App("postgresql://nobody@127.0.0.1:1/none", schema=schema)


@pytest.fixture
def unusual_schema(dsn: str, request: pytest.FixtureRequest) -> Iterator[str]:
    schema: str = request.param
    drop_schema(dsn, schema)
    yield schema
    drop_schema(dsn, schema)


@pytest.mark.parametrize("unusual_schema", ["Order", "MiXeD_Case", "user"], indirect=True)
def test_unusual_schema_names_work_end_to_end_with_a_real_worker(
    dsn: str, unusual_schema: str, processes: Processes
) -> None:
    with App(dsn, schema=unusual_schema, connect_timeout=3) as app:
        env = prepare_env(dsn, app, processes)
        worker = env.worker()
        handles = env.tasks.noop.delay_many([{}] * 20)
        wait_until(lambda: env.probe.status_counts() == {"done": 20}, timeout=20)
        worker.send(signal.SIGTERM)
        assert worker.wait_exit(10) == 0
        assert_invariants(env.probe, [handle.id for handle in handles])
        env.probe.close()
    processes.close()
