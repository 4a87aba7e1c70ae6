"""Several stores behind one App (stores as schemas of the test server): routes, ids that
name their store, one worker per store, and the refusals of what would cross stores."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgtasks import App, ConfigurationError, CrossStoreError, JobNotFoundError, Store, Worker, chain
from pgtasks._worker.beat import Beat
from tests.support.inprocess import running_worker
from tests.support.waiting import wait_until

ONE_STORE = 1 << 48


def rows_in(admin: psycopg.Connection[Any], schema: str) -> list[tuple[int, str]]:
    query = sql.SQL("SELECT id, queue FROM {}.jobs ORDER BY id").format(sql.Identifier(schema))
    return [(row[0], row[1]) for row in admin.execute(query).fetchall()]


def add_tasks(app: App) -> dict[str, Any]:
    @app.task(name="work")
    def work(x: int) -> int:
        return x * 2

    @app.task(name="mail", queue="emails")
    def mail(x: int) -> int:
        return x + 1

    @app.task(name="limited", queue="emails", concurrency=1)
    def limited(x: int) -> int:
        return x

    return {"work": work, "mail": mail, "limited": limited}


@pytest.fixture
def stores_app(make_stores_app: Callable[..., App]) -> App:
    return make_stores_app(routes={"emails": "bulk", "reports": "bulk"})


def test_single_store_app_is_store_zero_with_unchanged_ids(app: App, admin: Any) -> None:
    add_tasks(app)
    handle = app.tasks["work"].delay(1)
    assert 0 < handle.id < ONE_STORE
    identity = app.database.run(app.queries.get_store_identity)
    assert identity.number == 0 and len(identity.uid) == 36
    assert app.store_router.single and app.for_store("default") is app


def test_queues_route_to_their_store_and_ids_name_it(stores_app: App, admin: Any) -> None:
    tasks = add_tasks(stores_app)
    plain = tasks["work"].delay(2)
    mail = tasks["mail"].delay(3)
    report = tasks["work"].apply_async((4,), queue="reports")
    assert plain.id >> 48 == 0 and mail.id >> 48 == 1 and report.id >> 48 == 1
    default_schema, bulk_schema = stores_app.schemas["default"], stores_app.schemas["bulk"]  # type: ignore[attr-defined]
    assert rows_in(admin, default_schema) == [(plain.id, "default")]
    assert rows_in(admin, bulk_schema) == [(mail.id, "emails"), (report.id, "reports")]
    # By id alone: status, rows, cancel.
    assert stores_app.get_job(mail.id).status() == "pending"
    assert [row.id for row in stores_app.get_jobs([report.id, plain.id, mail.id])] == sorted(
        [plain.id, mail.id, report.id]
    )
    assert stores_app.cancel(report.id).outcome == "cancelled"
    with pytest.raises(JobNotFoundError, match="store number 7"):
        stores_app.get_job((7 << 48) + 1)


def test_one_worker_serves_one_store(stores_app: App) -> None:
    tasks = add_tasks(stores_app)
    mail, plain = tasks["mail"].delay(1), tasks["work"].delay(5)
    with pytest.raises(ConfigurationError, match="stores default, bulk: a worker serves one"):
        Worker(stores_app)
    with pytest.raises(ConfigurationError, match=r"span stores .*emails → bulk.*default → default"):
        Worker(stores_app, queues=["emails", "default"])
    with pytest.raises(ConfigurationError, match="queues default do not route to store 'bulk'"):
        Worker(stores_app, queues=["default"], store="bulk")
    with running_worker(stores_app, queues=["emails"]) as worker:
        assert worker.app.store_name == "bulk"
        assert mail.get(timeout=10) == 2
        assert stores_app.get_job(plain.id).status() == "pending"
    with running_worker(stores_app, store="default"):
        assert plain.get(timeout=10) == 10


def test_migrate_numbers_new_stores_and_keeps_numbered_ones(
    make_stores_app: Callable[..., App],
) -> None:
    app = make_stores_app(("default", "bulk", "more"), numbers={"more": 5})
    numbers = {name: identity.number for name, identity in app.store_router.identities().items()}  # type: ignore[union-attr]
    assert numbers == {"default": 0, "bulk": 1, "more": 5}
    app.migrate()  # again: nothing changes
    again = {name: identity.number for name, identity in app.store_router.identities().items()}  # type: ignore[union-attr]
    assert again == numbers


def test_two_stores_with_one_number_are_refused_naming_both(
    make_stores_app: Callable[..., App], make_app: Callable[..., App]
) -> None:
    first, second = make_app(), make_app()
    for single in (first, second):  # two existing installs: both store 0, both issued ids
        add_tasks(single)
        single.tasks["work"].delay(1)
    app = App(
        stores={
            "default": Store(first.dsn, schema=first.schema),
            "bulk": Store(second.dsn, schema=second.schema),
        }
    )
    try:
        with pytest.raises(ConfigurationError, match="stores 'default' and 'bulk' both have"):
            app.migrate()
        with pytest.raises(ConfigurationError, match="stores 'default' and 'bulk' both have"):
            app.get_job(1)
        with pytest.raises(ConfigurationError, match="'default' and 'bulk'"):
            app.store_router.check()
    finally:
        app.close()


def test_a_store_that_used_up_its_ids_fails_loudly(stores_app: App, admin: Any) -> None:
    tasks = add_tasks(stores_app)
    bulk = stores_app.schemas["bulk"]  # type: ignore[attr-defined]
    last = (2 << 48) - 1
    admin.execute(
        sql.SQL("ALTER SEQUENCE {} RESTART WITH {}").format(
            sql.Identifier(bulk, "jobs_id_seq"), sql.Literal(last)
        )
    )
    assert tasks["mail"].delay(1).id == last
    with pytest.raises(psycopg.Error, match="reached maximum value"):
        tasks["mail"].delay(2)


def test_a_workflow_across_stores_is_refused_naming_the_steps(stores_app: App) -> None:
    tasks = add_tasks(stores_app)
    expected = (
        r"step 0 \(queue 'default'\) goes to store 'default',"
        r" step 1 \(queue 'emails'\) to store 'bulk'"
    )
    with pytest.raises(CrossStoreError, match=expected):
        chain(tasks["work"].s(1), tasks["mail"].s()).delay()
    result = chain(tasks["mail"].s(1), tasks["work"].s().set(queue="reports")).delay()
    assert result.id >> 48 == 1
    with running_worker(stores_app, store="bulk"):
        assert result.get(timeout=10) == 4


def test_a_limited_task_is_held_to_its_queue_store(stores_app: App) -> None:
    tasks = add_tasks(stores_app)
    with pytest.raises(CrossStoreError, match="task 'limited' has limits, held in store 'bulk'"):
        tasks["limited"].apply_async((1,), queue="default")
    assert tasks["limited"].apply_async((1,), queue="reports").id >> 48 == 1
    with pytest.raises(CrossStoreError, match="one enqueue writes to one store"):
        stores_app.enqueue_many(
            [tasks["work"].build_spec((1,), {}), tasks["mail"].build_spec((1,), {})]
        )


def test_connection_of_another_store_is_refused(
    make_stores_app: Callable[..., App], other_database: str, dsn: str, admin: Any
) -> None:
    app = make_stores_app(routes={"emails": "bulk"}, dsns={"bulk": other_database})
    tasks = add_tasks(app)
    assert tasks["mail"].delay(1).id >> 48 == 1
    with psycopg.connect(dsn) as conn:  # the default store's database: a transaction
        with pytest.raises(CrossStoreError, match="not a connection to store 'bulk'"):
            tasks["mail"].apply_async((1,), connection=conn)
        handle = tasks["work"].apply_async((1,), connection=conn)  # its own store: joins it
        conn.commit()
    assert app.get_job(handle.id).status() == "pending"
    with psycopg.connect(other_database) as conn:
        with pytest.raises(CrossStoreError, match="not a connection to store 'default'"):
            tasks["work"].apply_async((1,), connection=conn)
        conn.rollback()
        joined = tasks["mail"].apply_async((2,), connection=conn)
        conn.rollback()  # rolled back with the caller's transaction
    with pytest.raises(JobNotFoundError):
        app.get_job(joined.id)


def test_beat_runs_one_loop_per_store(stores_app: App, admin: Any) -> None:
    tasks = add_tasks(stores_app)
    work = stores_app.add_periodic(tasks["work"], cron="* * * * *", args=(1,))
    mail = stores_app.add_periodic(tasks["mail"], cron="* * * * *", args=(2,))
    with pytest.raises(ConfigurationError, match="a Beat serves one"):
        Beat(stores_app)
    for name, schedule in (("default", work), ("bulk", mail)):
        view = stores_app.for_store(name)
        with view.database.connection() as conn:
            Beat(view).run_pass(conn)
        schema = stores_app.schemas[name]  # type: ignore[attr-defined]
        query = sql.SQL("SELECT name FROM {}.periodic").format(sql.Identifier(schema))
        assert [row[0] for row in admin.execute(query)] == [schedule.name]


def test_stores_need_a_default_and_known_routes() -> None:
    with pytest.raises(ConfigurationError, match="needs a store named 'default'"):
        App(stores={"bulk": "postgresql://h/db"})
    with pytest.raises(ConfigurationError, match="store 'nowhere', which stores= does not name"):
        App(stores={"default": "postgresql://h/db"}, routes={"emails": "nowhere"})
    with pytest.raises(ConfigurationError, match="dsn= or stores=, not both"):
        App("postgresql://h/db", stores={"default": "postgresql://h/db2"})
    with pytest.raises(ConfigurationError, match="same database and schema"):
        App(stores={"default": "postgresql://h/db", "bulk": "postgresql://h/db"})


def test_move_a_queue_and_the_stranded_jobs_doctor_sees(
    make_stores_app: Callable[..., App],
) -> None:
    from pgtasks._app.doctor import check_stranded

    before = make_stores_app()  # emails routes to default
    tasks = add_tasks(before)
    old = [tasks["mail"].delay(n) for n in range(3)]
    assert all(handle.id >> 48 == 0 for handle in old)
    after = App(
        stores={
            name: Store(before.dsn, schema=schema)
            for name, schema in before.schemas.items()  # type: ignore[attr-defined]
        },
        routes={"emails": "bulk"},
    )
    new_tasks = add_tasks(after)
    try:
        stranded = after.for_store("default")
        rows = stranded.database.run(stranded.queries.count_stranded_jobs)
        finding = check_stranded(stranded, rows)
        assert finding.level == "warning"
        assert "3 unfinished job(s) in store 'default'" in finding.summary
        assert "emails (3, routed to bulk)" in finding.summary
        # Nothing drains the old store yet: the move times out, emails paused in bulk.
        timed_out = before.admin.move_queue("emails", "bulk", timeout=0.2, poll=0.05)
        assert (timed_out.left, timed_out.done) == (3, False)
        assert after.for_store("bulk").paused_queues() == ["emails"]
        newer = new_tasks["mail"].delay(10)  # producers switched: waits, paused, in bulk
        assert newer.id >> 48 == 1
        seen: list[int] = []
        with running_worker(before, store="default"):  # the old store's worker drains it
            moved = before.admin.move_queue("emails", "bulk", poll=0.05, waiting=seen.append)
            assert [handle.get(timeout=10) for handle in old] == [1, 2, 3]
        assert moved.done and after.for_store("bulk").paused_queues() == []
        with running_worker(after, store="bulk"):
            assert newer.get(timeout=10) == 11
        assert (
            check_stranded(
                stranded, stranded.database.run(stranded.queries.count_stranded_jobs)
            ).level
            == "ok"
        )
        with pytest.raises(ConfigurationError, match="routes to store 'bulk' already"):
            after.admin.move_queue("emails", "bulk")
    finally:
        after.close()


def test_a_worker_metrics_name_its_store(stores_app: App) -> None:
    pytest.importorskip("prometheus_client")
    import urllib.request

    from pgtasks._worker.metrics import WorkerMetrics

    metrics = WorkerMetrics(queue_depth_interval=0.2)
    metrics.serve(0)

    def scraped() -> str:
        with urllib.request.urlopen(f"http://{metrics.address}/metrics", timeout=5) as page:
            return str(page.read().decode())

    add_tasks(stores_app)["mail"].delay(1)
    try:
        with running_worker(stores_app, store="bulk", observers=[metrics]):
            bulk = stores_app.schemas["bulk"]  # type: ignore[attr-defined]
            info = wait_until(
                lambda: next(
                    (line for line in scraped().splitlines() if "pgtasks_worker_info{" in line),
                    None,
                ),
                message="the worker's info series",
            )
            assert 'store="bulk"' in info and f'schema="{bulk}"' in info
    finally:
        metrics.close()


def test_a_worker_refuses_to_start_on_duplicate_stores(
    make_stores_app: Callable[..., App], admin: Any
) -> None:
    app = make_stores_app()
    bulk = app.schemas["bulk"]  # type: ignore[attr-defined]
    admin.execute(sql.SQL("UPDATE {}.instance SET store_no = 0").format(sql.Identifier(bulk)))
    fresh = App(
        stores={
            name: Store(app.dsn, schema=schema)
            for name, schema in app.schemas.items()  # type: ignore[attr-defined]
        }
    )
    try:
        worker = Worker(fresh, store="bulk")
        with pytest.raises(ConfigurationError, match="stores 'default' and 'bulk' both have"):
            worker.run()
    finally:
        fresh.close()


def test_each_store_holds_the_limits_of_its_queues(stores_app: App) -> None:
    """A limit lives in the store of its queue (a task's: the task's queue): a worker stores
    its store's limits only, and the limited claim holds them there."""

    running, most = [0], [0]
    lock = threading.Lock()

    @stores_app.task(name="paced", queue="emails", concurrency=1)
    def paced(n: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return n

    @stores_app.task(name="plain")
    def plain(n: int) -> int:
        return n

    stores_app.queue("default", concurrency=2)
    names = {
        name: [limit.name for limit in stores_app.for_store(name).limit_definitions()]
        for name in ("default", "bulk")
    }
    assert names == {"default": ["queue:default"], "bulk": ["task:paced"]}
    assert [limit.name for limit in stores_app.limit_definitions()] == [
        "queue:default",
        "task:paced",
    ]
    handles = [paced.delay(n) for n in range(4)]
    assert all(handle.id >> 48 == 1 for handle in handles)
    with running_worker(stores_app, store="bulk", concurrency=4):
        assert [handle.get(timeout=20) for handle in handles] == [0, 1, 2, 3]
    assert most[0] == 1  # concurrency=1 held in the bulk store
    stored = {name: stores_app.for_store(name).admin.limits() for name in ("default", "bulk")}
    assert [state.name for state in stored["bulk"] if state.stored] == ["task:paced"]
    assert [state.name for state in stored["default"] if state.stored] == []
    with running_worker(stores_app, store="default"):
        assert plain.delay(7).get(timeout=10) == 7
    default_limits = stores_app.for_store("default").admin.limits()
    assert [state.name for state in default_limits if state.stored] == ["queue:default"]


def test_every_connection_of_every_store_runs_read_committed(
    make_stores_app: Callable[..., App], other_database: str, dsn: str
) -> None:
    """A store on a database whose default isolation is SERIALIZABLE: its pools, its session
    connections and its worker's claims run READ COMMITTED (the limited claim refuses to
    count outside it), and doctor of that store says so."""
    from pgtasks._app.doctor import diagnose

    with psycopg.connect(dsn, autocommit=True) as conn:
        name = psycopg.conninfo.conninfo_to_dict(other_database)["dbname"]
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET default_transaction_isolation = 'serializable'").format(
                sql.Identifier(str(name))
            )
        )
    with psycopg.connect(other_database, autocommit=True) as conn:  # the scenario's premise
        assert conn.execute("SHOW transaction_isolation").fetchone() == ("serializable",)
    app = make_stores_app(routes={"emails": "bulk"}, dsns={"bulk": other_database})
    bulk = app.for_store("bulk")

    def isolation(conn: psycopg.Connection[Any]) -> str:
        row = conn.execute("SHOW transaction_isolation").fetchone()
        return str(row[0]) if row else ""

    async def async_isolation() -> str:
        async def read(conn: psycopg.AsyncConnection[Any]) -> str:
            row = await (await conn.execute("SHOW transaction_isolation")).fetchone()
            return str(row[0]) if row else ""

        try:
            return await bulk.database.arun(read)
        finally:
            await bulk.database.aclose()

    assert bulk.database.run(isolation) == "read committed"
    assert asyncio.run(async_isolation()) == "read committed"
    with bulk.database.connect(session=True) as conn:
        assert isolation(conn) == "read committed"

    @app.task(name="limited_mail", queue="emails", concurrency=1)
    def limited_mail(n: int) -> int:
        return n + 1

    handles = [limited_mail.delay(n) for n in range(3)]
    with running_worker(app, store="bulk"):
        assert [handle.get(timeout=20) for handle in handles] == [1, 2, 3]
    with bulk.database.connection() as conn:
        found = {finding.check: finding for finding in diagnose(bulk, conn)}
    assert found["isolation"].level == "ok"
    assert "database default SERIALIZABLE" in found["isolation"].summary
