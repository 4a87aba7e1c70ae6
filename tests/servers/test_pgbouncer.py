"""pgtasks behind a real PgBouncer in transaction mode (Debian's pgbouncer, started by
.ci/run; PGTASKS_TEST_PGBOUNCER_DSN, in front of PGTASKS_TEST_DSN).

With ``session_dsn`` the claims, finishes and enqueues go through the pooler and LISTEN
goes to the server itself; without it pgtasks polls, beat runs without leader election,
migrate refuses, and doctor says so. Prepared statements stay off (PgBouncer 1.18 cannot
hold them), startup options are never sent to the pooler, and a pooler that refuses them
gets an actionable error. The worker, beat, workflow, limits and results tests also run
through PgBouncer in CI (PGTASKS_TEST_VIA_PGBOUNCER=1, see .ci/run).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from pgtasks import App, ConfigurationError, JobContext, JobStatus, Worker
from pgtasks._app.doctor import diagnose
from pgtasks._worker.beat import Beat
from pgtasks.sql import load_migrations
from tests.support.inprocess import running_worker
from tests.support.schemas import create_migrated_schema, drop_schema
from tests.support.servers import pgbouncer_dsn
from tests.support.waiting import wait_until

Connection = psycopg.Connection[Any]


@pytest.fixture
def bouncer() -> str:
    return pgbouncer_dsn()


@pytest.fixture
def console(bouncer: str) -> Iterator[Connection]:
    """PgBouncer's admin console (SHOW CLIENTS, SHOW POOLS)."""
    params = conninfo.conninfo_to_dict(bouncer)
    params["dbname"] = "pgbouncer"
    with psycopg.connect(conninfo.make_conninfo(**params), autocommit=True) as conn:
        yield conn


def pooler_clients(console: Connection, application_name: str) -> list[dict[str, Any]]:
    cursor = console.execute("SHOW CLIENTS")
    names = [column.name for column in cursor.description or ()]
    rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    return [row for row in rows if row.get("application_name") == application_name]


def test_a_worker_behind_pgbouncer_claims_through_it_and_listens_on_the_session_dsn(
    make_app: Callable[..., App], bouncer: str, dsn: str, console: Connection
) -> None:
    app = make_app(dsn=bouncer, session_dsn=dsn)

    @app.task
    def double(x: int) -> int:
        return 2 * x

    assert app.database.pooled and app.database.has_session
    assert not app.database.prepared_statements
    with running_worker(app, concurrency=8, poll_interval=1.0) as worker:
        handles = double.delay_many([{"x": n} for n in range(300)])  # pipelined round trips
        assert [handle.get(timeout=30) for handle in handles] == [2 * n for n in range(300)]
        ports = service_ports(worker)
        pooled = pooler_clients(console, f"pgtasks worker {worker.name}")
        assert app.result_listener().healthy  # job.get() was woken by NOTIFY
    direct_port, bouncer_port = port_of(dsn), port_of(bouncer)
    assert ports["listener"] == direct_port  # LISTEN needs a session of its own
    assert ports["heartbeat"] == ports["rescuer"] == ports["claim loop"] == bouncer_port
    assert pooled, "no connection of the worker went through PgBouncer"
    rows = app.get_jobs([handle.id for handle in handles])
    assert {row.status for row in rows} == {JobStatus.DONE} and len(rows) == 300
    assert {row.attempts for row in rows} == {1}


def port_of(dsn: str) -> int:
    return int(conninfo.conninfo_to_dict(dsn)["port"])


def service_ports(worker: Worker) -> dict[str, int]:
    """The server port each connection of a running worker goes to (the pruner's first
    pass comes after prune_interval: left out)."""
    services = [service for service in worker._services if service.name != "pruner"]
    wait_until(
        lambda: all(service.connection.current is not None for service in services),
        message="the services connected",
    )
    ports = {
        service.name: conn.info.port
        for service in services
        if (conn := service.connection.current) is not None
    }
    ports["claim loop"] = worker._connection.get().info.port
    return ports


def test_without_a_session_dsn_workers_poll_cancel_and_doctor_says_so(
    make_app: Callable[..., App], bouncer: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(dsn=bouncer, session_dsn=None, pooled=True)
    started = threading.Event()

    @app.task
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(bind=True)
    def wait_for_cancel(ctx: JobContext) -> str:
        started.set()
        deadline = time.monotonic() + 20
        while not ctx.cancelled() and time.monotonic() < deadline:
            time.sleep(0.02)
        return "cancelled" if ctx.cancelled() else "not cancelled"

    assert not app.database.has_session
    with (
        caplog.at_level(logging.WARNING),
        running_worker(
            app, poll_interval=1.0, heartbeat_interval=5.0, lease_timeout=15.0
        ) as worker,
    ):
        assert add.delay(2, 3).get(timeout=15) == 5  # found by polling, read by polling
        ports = service_ports(worker)
        job = wait_for_cancel.delay()
        assert started.wait(15)
        app.cancel(job.id)
        # No NOTIFY reaches the worker: its listener polls the cancel requests every
        # half poll interval (the heartbeat's 5 s would be later).
        wait_until(
            lambda: job.status() == JobStatus.CANCELLED, timeout=4, message="the job cancelled"
        )
    assert set(ports.values()) == {port_of(bouncer)}  # nothing connects around the pooler
    assert not app.result_listener().healthy
    assert any("no session_dsn is set: no LISTEN" in r.getMessage() for r in caplog.records)

    with app.connection() as conn:
        findings = {finding.check: finding for finding in diagnose(app, conn)}
    assert findings["pooler"].level == "warning"
    assert "instead of LISTEN" in findings["pooler"].summary
    assert "session_dsn" in findings["pooler"].remedy
    with pytest.raises(ConfigurationError, match="migrate needs a direct connection"):
        app.migrate()


def test_two_beats_behind_pgbouncer_without_a_session_dsn_enqueue_each_tick_once(
    make_app: Callable[..., App], bouncer: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(dsn=bouncer, session_dsn=None, pooled=True)

    @app.task
    def tick() -> None:
        return None

    app.add_periodic(tick, every=timedelta(seconds=1), name="tick")
    beats = [Beat(app) for _ in range(2)]
    threads = [threading.Thread(target=beat.run, daemon=True) for beat in beats]
    with caplog.at_level(logging.WARNING, logger="pgtasks.beat"):
        for thread in threads:
            thread.start()
        try:
            wait_until(lambda: all(beat.is_leader for beat in beats), message="both beats active")
            wait_until(lambda: len(tick_jobs(app)) >= 4, timeout=15, message="four ticks enqueued")
        finally:
            for beat in beats:
                beat.stop(10)
    keys = tick_jobs(app)
    assert len(keys) == len(set(keys)), "a tick was enqueued twice"
    assert sum("without leader election" in r.getMessage() for r in caplog.records) == 2


def tick_jobs(app: App) -> list[str]:
    with app.connection() as conn:
        rows = conn.execute(
            sql.SQL("SELECT idempotency_key FROM {} WHERE task_name LIKE %s").format(
                sql.Identifier(app.schema, "jobs")
            ),
            ("%tick",),
        ).fetchall()
    return [row[0] for row in rows]


def test_a_pooler_that_refuses_startup_options_gets_an_actionable_error(
    make_app: Callable[..., App], bouncer: str
) -> None:
    """Not declared as pooled, every connection sends the startup option that pins its
    isolation (READ COMMITTED); PgBouncer 1.18 refuses it: the app's first connection and
    a worker say what to declare."""
    app = make_app(dsn=bouncer, session_dsn=None, pooled=False, migrate=False)

    with pytest.raises(ConfigurationError) as first:
        app.check_schema()
    with pytest.raises((ConfigurationError, psycopg.OperationalError)) as worker:
        Worker(app, concurrency=1).run()

    for refused in (first, worker):
        message = str(refused.value)
        assert "unsupported startup parameter" in message
        assert "App(dsn=<pooler>, session_dsn=<the server itself>)" in message
        assert "App(pooled=True)" in message


def enqueue_from_threads(app: App, threads: int, per_thread: int) -> list[Exception]:
    @app.task(name=f"noop_{secrets.token_hex(3)}")
    def noop() -> None:
        return None

    errors: list[Exception] = []
    barrier = threading.Barrier(threads)

    def enqueue() -> None:
        barrier.wait()
        for _ in range(per_thread):
            try:
                noop.apply_async(idempotency_key=secrets.token_hex(8))  # the same statement
            except Exception as error:
                errors.append(error)

    workers = [threading.Thread(target=enqueue) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(60)
    return errors


def test_prepared_statements_stay_off_through_the_pooler(
    make_app: Callable[..., App], bouncer: str, dsn: str
) -> None:
    pooled = make_app(dsn=bouncer, session_dsn=dsn, pool_max_size=16)
    assert enqueue_from_threads(pooled, 16, 40) == []

    # The same load with prepare_threshold at psycopg's default (prepared_statements=True,
    # for PgBouncer >= 1.21 with max_prepared_statements) fails on PgBouncer 1.18: a
    # statement prepared on one server connection is executed on another, which does not
    # hold it, or holds another client's statement of the same name.
    preparing = make_app(dsn=bouncer, session_dsn=dsn, prepared_statements=True, pool_max_size=16)
    errors = enqueue_from_threads(preparing, 16, 40)
    assert errors, "no prepared statement went missing: is the pooler in transaction mode?"
    lost = [error for error in errors if isinstance(error, ConfigurationError)]
    assert lost, [repr(error) for error in errors[:3]]
    for error in lost:  # each says what to configure
        assert "lost a prepared statement" in str(error)
        assert "prepared_statements=False" in str(error)


def test_migrate_and_the_schema_check_use_the_session_dsn(
    make_app: Callable[..., App], bouncer: str, dsn: str
) -> None:
    app = make_app(dsn=bouncer, session_dsn=dsn, migrate=False)

    applied = app.migrate()

    latest = len(load_migrations())
    assert applied and app.migration_plan().describe().endswith(f"is up to date (version {latest})")
    assert "pooled; sessions: 127.0.0.1" in app.describe_database()


def test_doctor_says_when_the_poolers_server_connections_do_not_run_read_committed(
    dsn: str, bouncer: str
) -> None:
    """A database whose default is REPEATABLE READ, reached through PgBouncer: pgtasks
    cannot pin the isolation per session there, so doctor names it critical."""
    database = f"pgtasks_rr_{secrets.token_hex(3)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
        conn.execute(
            sql.SQL(
                "ALTER DATABASE {} SET default_transaction_isolation = 'repeatable read'"
            ).format(sql.Identifier(database))
        )
    direct = conninfo.make_conninfo(dsn, dbname=database)
    pooled = conninfo.make_conninfo(bouncer, dbname=database)
    schema = "pgtasks_doctor"
    try:
        with psycopg.connect(direct, autocommit=True) as conn:
            create_migrated_schema(conn, schema)
        with App(pooled, session_dsn=direct, schema=schema) as app, app.connection() as conn:
            findings = {finding.check: finding for finding in diagnose(app, conn)}
        assert findings["pooler"].level == "critical"
        assert "repeatable read" in findings["pooler"].summary
        assert "default_transaction_isolation" in findings["pooler"].remedy
    finally:
        drop_schema(direct, schema)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(database)))
