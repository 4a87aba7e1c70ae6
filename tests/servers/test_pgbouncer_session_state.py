"""No session state of pgtasks is left on PgBouncer's server connections (transaction mode).

Through a transaction pooler, one client's statements run on whichever server connection
the pooler lends: a session advisory lock, a LISTEN, a ``SET`` (not ``SET LOCAL``) or a
prepared statement left behind would be held, heard or seen by another client (or keep the
lock, the leadership of beat or the pruner, forever). After a worker (with its pruner
pruning), beat, enqueues, workflows, cancels, retries and the dashboard's actions ran
through PgBouncer, with a session DSN and without one (pooled=True: beat and the pruner
then run through the pooler too), every server connection PgBouncer holds is sampled
through the pooler itself, all of them lent at once: none holds an advisory lock, listens
on a channel, keeps a prepared statement or a temporary table, or has a setting pgtasks
changes at other than its default.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from pgtasks import App, chain, group
from pgtasks._worker.beat import Beat
from pgtasks.web import asgi
from tests.support.inprocess import running_worker
from tests.support.servers import pgbouncer_dsn
from tests.support.waiting import wait_until
from tests.support.web import Client

Connection = psycopg.Connection[Any]

#: Settings pgtasks sets somewhere (startup options of direct connections, set_config in
#: transactions, beat's and migrate's session settings): none may stay on a lent server
#: connection.
SETTINGS = (
    "statement_timeout",
    "lock_timeout",
    "idle_in_transaction_session_timeout",
    "default_transaction_isolation",
    "plan_cache_mode",
    "enable_seqscan",
    "enable_bitmapscan",
    "jit",
    "tcp_keepalives_idle",
    "search_path",
    "pgtasks.archiving",
    "pgtasks.keys_handled",
    "pgtasks.self_notified",
    "pgtasks.workflow_cascade",
)

SAMPLE = (
    "SELECT pg_backend_pid() AS pid,"
    " (SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory')"
    " AS advisory_locks,"
    " (SELECT count(*) FROM pg_listening_channels()) AS channels,"
    " (SELECT count(*) FROM pg_prepared_statements) AS prepared,"
    " (SELECT count(*) FROM pg_class WHERE relpersistence = 't') AS temporary_tables,"
    " ARRAY[{}] AS settings"
).format(", ".join(f"coalesce(current_setting('{name}', true), '')" for name in SETTINGS))


@pytest.fixture
def bouncer() -> str:
    return pgbouncer_dsn()


@pytest.fixture
def console(bouncer: str) -> Iterator[Connection]:
    params = conninfo.conninfo_to_dict(bouncer)
    params["dbname"] = "pgbouncer"
    with psycopg.connect(conninfo.make_conninfo(**params), autocommit=True) as conn:
        yield conn


def server_pids(console: Connection, database: str) -> set[int]:
    cursor = console.execute("SHOW SERVERS")
    names = [column.name for column in cursor.description or ()]
    rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    return {int(row["remote_pid"]) for row in rows if row["database"] == database}


def sample_every_server_connection(bouncer: str, console: Connection) -> dict[int, dict[str, Any]]:
    """One transaction per server connection, all open at once (so the pooler lends each
    a different one), until every server connection PgBouncer holds for the database of
    ``bouncer`` was sampled."""
    database = str(conninfo.conninfo_to_dict(bouncer)["dbname"])
    seen: dict[int, dict[str, Any]] = {}
    for _ in range(5):
        wanted = server_pids(console, database)
        if wanted and wanted <= set(seen):
            break
        clients = [psycopg.connect(bouncer, prepare_threshold=None) for _ in range(len(wanted) + 2)]
        try:
            for client in clients:
                client.execute("BEGIN")
                cursor = client.execute(SAMPLE)
                names = [column.name for column in cursor.description or ()]
                row = dict(zip(names, cursor.fetchone() or (), strict=True))
                seen[int(row["pid"])] = row
        finally:
            for client in clients:
                client.rollback()
                client.close()
    return seen


def defaults(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(SAMPLE).fetchone()
    assert row is not None
    return list(row[-1])


def jobs_of(admin: Connection, app: App, task: str) -> int:
    row = admin.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE task_name = %s").format(
            sql.Identifier(app.schema, "all_jobs")
        ),
        (task,),
    ).fetchone()
    return int(row[0]) if row else 0


def exercise(app: App, admin: Connection) -> None:
    """What pgtasks does through the pooler: a worker with a pruner that prunes, beat,
    enqueues, workflows, a cancel, a retry, the dashboard's actions."""

    @app.task(name="state.add")
    def add(x: int, y: int = 0) -> int:
        return x + y

    @app.task(name="state.fail", max_attempts=1)
    def fail() -> None:
        raise RuntimeError("no")

    @app.task(name="state.tick")
    def tick() -> None:
        return None

    app.add_periodic(tick, every=timedelta(seconds=1), name="state-tick")
    beat = Beat(app)
    beat_thread = threading.Thread(target=beat.run, daemon=True)
    beat_thread.start()
    web = Client(asgi(app))
    try:
        with running_worker(app, concurrency=4, poll_interval=0.5):
            ids = [handle.id for handle in add.delay_many([{"x": n} for n in range(50)])]
            wait_until(
                lambda: {row.status for row in app.get_jobs(ids)} == {"done"},
                timeout=30,
                message="the jobs done",
            )
            assert chain(add.s(1, 2), add.s(3)).delay().get(timeout=30) == 6
            assert group(add.s(n) for n in range(5)).delay().get(timeout=30) == list(range(5))
            failed = fail.delay()
            wait_until(lambda: failed.status() == "failed", timeout=30, message="job failed")
            assert web.post(f"/jobs/{failed.id}/retry").status_code == 303
            later = add.apply_async(args=(1,), countdown=3600)
            assert web.post(f"/jobs/{later.id}/cancel").status_code == 303
            assert web.get("/").status_code == 200 and web.get("/jobs").status_code == 200
            wait_until(
                lambda: jobs_of(admin, app, "state.tick") >= 2, timeout=20, message="beat ticks"
            )
            # The pruner deletes the done jobs (kept for five seconds).
            wait_until(lambda: jobs_of(admin, app, "state.add") < 50, timeout=30, message="a prune")
    finally:
        beat.stop(10)
        beat_thread.join(10)


@pytest.fixture
def database(bouncer: str, dsn: str) -> Iterator[tuple[str, str]]:
    """A database of this test, so that PgBouncer's pool for it holds only this test's
    server connections (other tests share the pooler, some leave state on purpose): its
    DSN through PgBouncer and directly; dropped afterwards."""
    name = f"pgtasks_state_{secrets.token_hex(3)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield conninfo.make_conninfo(bouncer, dbname=name), conninfo.make_conninfo(dsn, dbname=name)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.mark.parametrize("session", [True, False], ids=["session-dsn", "pooled-only"])
def test_no_session_state_is_left_on_the_poolers_server_connections(
    database: tuple[str, str], console: Connection, session: bool
) -> None:
    pooled, direct = database
    with App(direct, schema="pgtasks_state") as migrating:
        migrating.migrate()
    app = App(
        pooled,
        schema="pgtasks_state",
        session_dsn=direct if session else None,
        pooled=True,
        prune_done_after=5.0,
        prune_interval=0.5,
        connect_timeout=3.0,
    )
    try:
        with psycopg.connect(direct, autocommit=True) as admin:
            exercise(app, admin)
    finally:
        app.close()
    expected = defaults(direct)
    sampled = sample_every_server_connection(pooled, console)

    assert sampled, "no server connection sampled"
    for pid, row in sampled.items():
        assert row["advisory_locks"] == 0, (pid, row)
        assert row["channels"] == 0, (pid, row)
        assert row["prepared"] == 0, (pid, row)
        assert row["temporary_tables"] == 0, (pid, row)
        changed = {
            name: value
            for name, value, default in zip(SETTINGS, row["settings"], expected, strict=True)
            if value != default
        }
        assert not changed, (pid, changed)
