"""The enqueue fast paths: the self-notifying one-job insert and the binary bulk insert.

A one-job enqueue that is a transaction of its own notifies from its own statement and
tells the notify trigger (migration 0005) to skip it; every other insert path keeps the
trigger. Bulk enqueues send their columns in binary and args/kwargs as one JSON array.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgtasks import App, JobStatus, PayloadNotSerializableError, Task
from tests.support.inprocess import is_listening, running_worker
from tests.support.waiting import wait_until

Connection = psycopg.Connection[Any]


def count_jobs(admin: Connection, app: App) -> int:
    row = admin.execute(
        sql.SQL("SELECT count(*) FROM {}.all_jobs").format(sql.Identifier(app.schema))
    ).fetchone()
    assert row is not None
    return int(row[0])


def raw_insert(conn: Connection, app: App, queue: str) -> None:
    """An insert that does not go through pgtasks (psql, another service, a migration)."""
    conn.execute(
        sql.SQL(
            "INSERT INTO {}.jobs (task_name, queue, args, kwargs, max_attempts)"
            " VALUES ('raw.task', %s, '[]', '{{}}', 1)"
        ).format(sql.Identifier(app.schema)),
        (queue,),
    )


@pytest.fixture
def echo(app: App) -> Task[..., Any]:
    @app.task(name="echo", queue="echo")
    def echo(*args: Any, **kwargs: Any) -> Any:
        return [list(args), kwargs]

    return echo


# -- the one-job insert notifies by itself ---------------------------------------------------------
def test_one_due_job_sends_exactly_one_notification(
    app: App, echo: Task[..., Any], notifications: Callable[[str], list[str]]
) -> None:
    echo.delay()
    echo.apply_async(queue="marker")

    # One per due job's queue, as the trigger sent before 0005 (the statement's own
    # pg_notify; a trigger firing as well would be folded into it within the transaction).
    assert notifications("marker") == ["echo", "marker"]


def test_a_raw_insert_on_the_enqueuing_session_still_notifies(
    make_app: Callable[..., App], admin: Connection
) -> None:
    app = make_app(pool_min_size=1, pool_max_size=1)

    @app.task(name="ping", queue="first")
    def ping() -> None: ...

    admin.execute(sql.SQL("LISTEN {}").format(sql.Identifier(app.queries.channel)))
    ping.delay()
    with app.connection() as conn:  # the very session ping.delay() used (pool of one)
        flag = conn.execute("SELECT current_setting('pgtasks.self_notified', true)").fetchone()
        assert flag is not None and flag[0] != "on"
        raw_insert(conn, app, "second")

    payloads = [notify.payload for notify in admin.notifies(timeout=10, stop_after=2)]

    assert payloads == ["first", "second"]


def test_a_raw_insert_and_a_copy_notify_through_the_trigger(
    app: App, admin: Connection, dsn: str, notifications: Callable[[str], list[str]]
) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        raw_insert(conn, app, "raw")
        copy = sql.SQL(
            "COPY {}.jobs (task_name, queue, args, kwargs, max_attempts) FROM STDIN"
        ).format(sql.Identifier(app.schema))
        with conn.cursor() as cursor, cursor.copy(copy) as rows:
            rows.write_row(("raw.task", "copied", "[]", "{}", 1))
        raw_insert(conn, app, "marker")

    assert notifications("marker") == ["raw", "copied", "marker"]


def test_in_the_callers_transaction_later_raw_inserts_still_notify(
    app: App, dsn: str, echo: Task[..., Any], notifications: Callable[[str], list[str]]
) -> None:
    with psycopg.connect(dsn) as conn:  # not autocommit: one transaction
        echo.apply_async(connection=conn)
        raw_insert(conn, app, "raw-after")
        flag = conn.execute("SELECT current_setting('pgtasks.self_notified', true)").fetchone()
        assert flag is not None and flag[0] != "on"
        conn.commit()
    echo.apply_async(queue="marker")

    assert sorted(notifications("marker")) == ["echo", "marker", "raw-after"]


def test_a_transaction_of_many_enqueues_sends_one_notification_per_queue(
    app: App, dsn: str, echo: Task[..., Any], notifications: Callable[[str], list[str]]
) -> None:
    # Every inserting statement notifies its due jobs' queues (the trigger, or the one-job
    # statement's own pg_notify); PostgreSQL folds the same queue's notifications of one
    # transaction into one, which is all a listener needs to wake.
    with psycopg.connect(dsn) as conn:  # not autocommit: one transaction
        for index in range(5):
            echo.apply_async((index,), connection=conn)
        echo.delay_many([((index,), {}) for index in range(100)], connection=conn)
        echo.apply_async(queue="other", connection=conn)
        raw_insert(conn, app, "echo")
        echo.apply_async(countdown=3600, queue="later", connection=conn)  # not due: silent
        conn.commit()
    echo.apply_async(queue="marker")

    assert notifications("marker") == ["echo", "other", "marker"]
    assert count_jobs_of(dsn, app, "echo") == 106


def count_jobs_of(dsn: str, app: App, queue: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.jobs WHERE queue = %s").format(
                sql.Identifier(app.schema)
            ),
            (queue,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_an_autocommit_connection_of_the_caller_gets_the_self_notifying_insert(
    app: App, admin: Connection, dsn: str, echo: Task[..., Any], notifications: Any
) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        handle = echo.apply_async(("x",), connection=conn)
        raw_insert(conn, app, "marker")

    assert notifications("marker") == ["echo", "marker"]
    assert handle.status() is JobStatus.PENDING


def test_a_raw_insert_in_the_callers_pipeline_still_notifies(
    app: App, dsn: str, echo: Task[..., Any], notifications: Callable[[str], list[str]]
) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn, conn.pipeline():
        echo.apply_async(connection=conn)
        raw_insert(conn, app, "raw-in-pipeline")
    echo.apply_async(queue="marker")

    assert sorted(notifications("marker")) == ["echo", "marker", "raw-in-pipeline"]


def test_a_pooled_connection_left_out_of_autocommit_still_commits_the_enqueue(
    make_app: Callable[..., App], admin: Connection
) -> None:
    app = make_app(pool_min_size=1, pool_max_size=1)

    @app.task(name="ping")
    def ping() -> None: ...

    with app.connection() as conn:
        conn.autocommit = False  # a user's doing: the pool does not reset it

    handle = ping.delay()

    assert count_jobs(admin, app) == 1
    assert handle.status() is JobStatus.PENDING


def test_a_keyed_and_a_delayed_job_notify_like_the_trigger(
    app: App, echo: Task[..., Any], notifications: Callable[[str], list[str]]
) -> None:
    first = echo.apply_async(idempotency_key="k1")
    again = echo.apply_async(idempotency_key="k1", queue="not-inserted")
    echo.apply_async(countdown=60, queue="later")
    echo.apply_async(eta=datetime.now(timezone.utc) - timedelta(minutes=1), queue="overdue")
    echo.apply_async(queue="marker")

    assert notifications("marker") == ["echo", "overdue", "marker"]
    assert again.existed and again.id == first.id


def test_an_idle_queue_restricted_worker_wakes_for_each_enqueue_path(
    app: App, admin: Connection, dsn: str
) -> None:
    ran: list[str] = []

    @app.task(name="mark", queue="wake")
    def mark(label: str) -> None:
        ran.append(label)

    # A long poll interval: only a notification can start these jobs within seconds.
    with running_worker(app, queues=["wake"], poll_interval=30.0):
        wait_until(lambda: is_listening(admin, app), message="the worker to LISTEN")
        mark.delay("one")
        wait_until(lambda: "one" in ran, timeout=5.0, message="delay() to wake the worker")
        mark.delay_many([{"label": "bulk-1"}, {"label": "bulk-2"}])
        wait_until(lambda: "bulk-2" in ran, timeout=5.0, message="delay_many() to wake it")
        with psycopg.connect(dsn) as conn:
            mark.apply_async(("in-transaction",), connection=conn)
        wait_until(lambda: "in-transaction" in ran, timeout=5.0, message="the commit to wake")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {}.jobs (task_name, queue, args, kwargs, max_attempts)"
                    """ VALUES ('mark', 'wake', '["raw"]', '{{}}', 1)"""
                ).format(sql.Identifier(app.schema))
            )
        wait_until(lambda: "raw" in ran, timeout=5.0, message="a raw insert to wake it")


# -- the binary bulk insert ---------------------------------------------------------------------
PAYLOADS: list[tuple[list[Any], dict[str, Any]]] = [
    ([], {}),
    ([1, -2.5, True, None], {"x": "y"}),
    (['quote " backslash \\ tab \t newline \n'], {"uni": "é€😀", "sep": "\u2028"}),
    ([{"nested": [1, {"deep": []}]}], {"a,b": "[1,2]", "}": "{"}),
    ([10**30, 1e-300], {"empty": {}, "list": []}),
]


def test_bulk_ids_come_back_in_item_order_and_every_payload_round_trips(
    app: App, echo: Task[..., Any]
) -> None:
    items = [(args, kwargs) for args, kwargs in PAYLOADS * 40]

    handles = echo.delay_many(items)

    ids = [handle.id for handle in handles]
    assert ids == sorted(ids) and len(set(ids)) == len(items)
    rows = {row.id: row for row in app.get_jobs(ids)}
    for handle, (args, kwargs) in zip(handles, items, strict=True):
        assert (rows[handle.id].args, rows[handle.id].kwargs) == (args, kwargs)
        assert not handle.existed


def test_bulk_keeps_every_option_of_every_spec(app: App, admin: Connection) -> None:
    @app.task(name="opts")
    def opts(n: int) -> None: ...

    when = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)
    specs = [
        opts.build_spec((0,), priority=2**31 - 1, queue="q1", max_attempts=1),
        opts.build_spec((1,), priority=-(2**31), queue="q2", eta=when),
        opts.build_spec((2,), countdown=90, max_attempts=2**31 - 1),
        opts.build_spec((3,)),
    ]

    handles = app.enqueue_many(specs)

    rows = app.get_jobs([handle.id for handle in handles])
    assert [(row.priority, row.queue, row.max_attempts) for row in rows] == [
        (2**31 - 1, "q1", 1),
        (-(2**31), "q2", 5),
        (0, "default", 2**31 - 1),
        (0, "default", 5),
    ]
    assert rows[1].run_at == when
    delay = rows[2].run_at - rows[2].created_at
    assert delay == timedelta(seconds=90)
    assert rows[3].run_at == rows[3].created_at
    assert [row.args for row in rows] == [[0], [1], [2], [3]]


def test_a_bad_payload_in_a_batch_raises_a_clear_error_and_writes_nothing(
    app: App, admin: Connection, echo: Task[..., Any]
) -> None:
    items: list[Any] = [{"n": n} for n in range(500)]
    items[250] = {"n": object()}

    with pytest.raises(PayloadNotSerializableError, match="argument 'n' of task 'echo'"):
        echo.delay_many(items)

    assert count_jobs(admin, app) == 0


def test_a_bulk_enqueue_in_the_callers_transaction_rolls_back_cleanly(
    app: App, admin: Connection, dsn: str, echo: Task[..., Any], notifications: Any
) -> None:
    with psycopg.connect(dsn) as conn:
        handles = echo.delay_many([{"n": n} for n in range(300)], connection=conn)
        assert len(handles) == 300
        conn.rollback()
        assert count_jobs(admin, app) == 0
        echo.delay_many([{"n": 1}, {"n": 2}], connection=conn)
        assert count_jobs(admin, app) == 0  # not committed yet
        conn.commit()
    echo.apply_async(queue="marker")

    assert count_jobs(admin, app) == 3
    assert notifications("marker") == ["echo", "marker"]  # nothing from the rollback


def test_a_keyed_bulk_dedupes_against_the_table_and_within_the_batch(
    app: App, echo: Task[..., Any]
) -> None:
    existing = echo.apply_async(("old",), idempotency_key="a")
    specs = [
        echo.build_spec(("new",), idempotency_key="a"),
        echo.build_spec(("b1",), idempotency_key="b"),
        echo.build_spec(("free",)),
        echo.build_spec(("b2",), idempotency_key="b"),
    ]

    handles = app.enqueue_many(specs)

    assert [handle.existed for handle in handles] == [True, False, False, True]
    assert handles[0].id == existing.id and handles[1].id == handles[3].id
    rows = {row.id: row for row in app.get_jobs([handle.id for handle in handles])}
    assert rows[existing.id].args == ["old"]
    assert rows[handles[1].id].args == ["b1"]
    assert rows[handles[2].id].args == ["free"]


def test_async_one_job_and_bulk_paths_notify(
    app: App, echo: Task[..., Any], notifications: Callable[[str], list[str]]
) -> None:
    async def main() -> None:
        try:
            await echo.adelay("one")
            await echo.adelay_many([{"n": 1}, {"n": 2}])
            await echo.aapply_async(queue="marker")
        finally:
            await app.aclose()

    asyncio.run(main())

    assert notifications("marker") == ["echo", "echo", "marker"]


# -- delay_many's batches, and large batches of other plain jobs by COPY ---------------------------
def test_batches_by_copy_and_by_the_batch_insert_read_like_one_job_inserts_and_notify(
    app: App, echo: Task[..., Any], notifications: Callable[[str], list[str]]
) -> None:
    from pgtasks._store.inserts import COPY_MIN_JOBS

    items = [(args, kwargs) for args, kwargs in PAYLOADS * 40][: COPY_MIN_JOBS * 2]
    meta = {"tenant": "tab\there", "path": "C:\\jobs\n"}
    specs = [echo.build_spec(args, kwargs, meta=meta) for args, kwargs in items]

    batch = echo.delay_many(items, meta=meta)  # one statement, shared fields once
    copied = app.enqueue_many(specs)  # a list of plain specs, COPY_MIN_JOBS or more
    inserted = app.enqueue_many(specs[: COPY_MIN_JOBS - 1])  # fewer: INSERT of arrays
    one = echo.apply_async(items[0][0], items[0][1], meta=meta)
    echo.apply_async(queue="marker")

    assert notifications("marker") == ["echo", "echo", "echo", "echo", "marker"]
    handles = batch + copied + inserted + [one]
    rows = {row.id: row for row in app.get_jobs([handle.id for handle in handles])}
    for group in (batch, copied):
        ids = [handle.id for handle in group]
        assert ids == sorted(ids) and len(set(ids)) == len(items)
    for group in (batch, copied, inserted, [one]):
        for handle, (args, kwargs) in zip(group, items, strict=False):
            row = rows[handle.id]
            assert (row.args, row.kwargs, row.meta) == (args, kwargs, meta)
            assert (row.task_name, row.queue, row.priority, row.max_attempts) == (
                "echo",
                "echo",
                0,
                5,
            )
            assert row.status is JobStatus.PENDING and row.attempts == 0
            assert row.run_at == row.created_at
            assert not handle.existed


def test_batches_in_an_async_program_and_on_a_dropped_schema(
    app: App, echo: Task[..., Any], dsn: str
) -> None:
    from pgtasks import SchemaNotMigratedError
    from pgtasks._store.inserts import COPY_MIN_JOBS

    items = [{"n": n} for n in range(COPY_MIN_JOBS)]

    async def main() -> list[int]:
        try:
            batch = await echo.adelay_many(items)
            copied = await app.aenqueue_many([echo.build_spec((), item) for item in items])
        finally:
            await app.aclose()
        return [handle.id for handle in batch + copied]

    ids = asyncio.run(main())

    assert [row.kwargs for row in app.get_jobs(ids)] == items + items
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(app.schema)))
    with pytest.raises(SchemaNotMigratedError, match="pgtasks migrate"):
        echo.delay_many(items)
    with pytest.raises(SchemaNotMigratedError, match="pgtasks migrate"):
        app.enqueue_many([echo.build_spec((), item) for item in items])


def test_a_bad_item_of_a_batch_in_the_callers_transaction_leaves_it_usable(
    app: App, admin: Connection, dsn: str, echo: Task[..., Any]
) -> None:
    """A batch is built before anything is sent in the caller's transaction: an item that
    cannot be encoded raises while the transaction is still good (COPY is not aborted)."""
    items: list[Any] = [{"n": n} for n in range(200)]
    items[150] = {"n": object()}

    with psycopg.connect(dsn) as conn:
        echo.delay_many([{"n": 1}], connection=conn)
        with pytest.raises(PayloadNotSerializableError, match="argument 'n' of task 'echo'"):
            echo.delay_many(items, connection=conn)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        echo.delay_many(items[:100], connection=conn)
        conn.commit()

    assert count_jobs(admin, app) == 101
