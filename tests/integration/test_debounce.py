"""Debounced enqueues (``debounce=``, ``debounce_key=``, ``debounce_max=``) against the
real database: one pending job per key, the last arguments win, run_at pushed and
capped, a started job never touched, concurrent enqueues race-free, bad input refused
before anything is written."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pgtasks import App, TaskRegistrationError
from pgtasks._app.debounce import Debounce
from pgtasks._leases import ClaimRequest
from pgtasks._worker.connection import WORKER_CONNECTION_OPTIONS
from tests.support.inprocess import execute, running_worker, select
from tests.support.waiting import wait_until

Connection = psycopg.Connection[Any]
THREADS = 20


def _row(admin: Connection, app: App, job_id: int) -> tuple[Any, ...]:
    return select(
        admin,
        app,
        "SELECT args, kwargs, run_at, meta -> 'pgtasks.debounce', created_at, status"
        " FROM {schema}.all_jobs WHERE id = %s",
        (job_id,),
    )[0]


def _count(admin: Connection, app: App, task_name: str) -> int:
    rows = select(
        admin, app, "SELECT count(*) FROM {schema}.all_jobs WHERE task_name = %s", (task_name,)
    )
    return int(rows[0][0])


def test_an_enqueue_while_pending_replaces_the_arguments_and_pushes_run_at(
    app: App, admin: Connection
) -> None:
    @app.task(name="reindex", debounce=timedelta(seconds=30), debounce_key=lambda doc, **_: doc)
    def reindex(doc: str, version: int = 0) -> None: ...

    first = reindex.delay("doc-1", version=1)
    first_run_at = _row(admin, app, first.id)[2]
    second = reindex.delay("doc-1", version=2)
    third = reindex.apply_async(["doc-1"], {"version": 3})
    other = reindex.delay("doc-2", version=9)

    assert second.id == third.id == first.id != other.id
    assert (first.existed, second.existed, third.existed) == (False, True, True)
    args, kwargs, run_at, debounce, created_at, status = _row(admin, app, first.id)
    assert (args, kwargs, status) == (["doc-1"], {"version": 3}, "pending")
    assert debounce["replaced"] == 2 and debounce["key"] == "doc-1"
    assert run_at >= first_run_at
    assert run_at - created_at >= timedelta(seconds=29)
    assert _count(admin, app, "reindex") == 2
    counters = select(
        admin, app, "SELECT sum(value) FROM {schema}.counters WHERE name = 'enqueues_debounced'"
    )
    assert counters == [(2,)]


def test_debounce_max_caps_the_push_from_the_first_enqueue(app: App, admin: Connection) -> None:
    @app.task(
        name="capped",
        debounce=timedelta(hours=1),
        debounce_key="all",
        debounce_max=timedelta(hours=1, seconds=30),
    )
    def capped(n: int) -> None: ...

    handle = capped.delay(1)
    _, _, _, debounce, created_at, _ = _row(admin, app, handle.id)
    assert debounce["until"] == pytest.approx(created_at.timestamp() + 3630, abs=0.01)
    # Move the first enqueue an hour back: the next push stops at first + debounce_max.
    select(
        admin,
        app,
        "UPDATE {schema}.jobs SET meta = jsonb_set(meta, ARRAY['pgtasks.debounce', 'until'],"
        " to_jsonb(extract(epoch FROM now()) + 30)) WHERE id = %s RETURNING id",
        (handle.id,),
    )
    capped.delay(2)
    args, _, run_at, debounce, _, _ = _row(admin, app, handle.id)
    now = select(admin, app, "SELECT now()")[0][0]
    assert args == [2] and debounce["replaced"] == 1
    assert run_at <= now + timedelta(seconds=31)


def test_the_default_key_is_the_identity_of_the_arguments(app: App, admin: Connection) -> None:
    @app.task(name="ping", debounce=timedelta(seconds=60))
    def ping(target: str, *, loud: bool = False) -> None: ...

    a = ping.apply_async(["x"], {"loud": True})
    b = ping.apply_async(kwargs={"loud": True, "target": "x"})
    c = ping.apply_async(["x"], {"loud": True})
    d = ping.delay("y")
    assert a.id == c.id and not a.existed and c.existed
    assert b.id not in (a.id, d.id)  # the same call by other argument positions is another key
    assert _count(admin, app, "ping") == 3


def test_a_started_job_is_not_touched_and_a_new_job_is_made(
    app: App, admin: Connection, dsn: str
) -> None:
    @app.task(name="sync_account", debounce=timedelta(seconds=0.001), debounce_key="acct")
    def sync_account(n: int) -> None: ...

    first = sync_account.delay(1)
    with psycopg.connect(dsn, autocommit=True, options=WORKER_CONNECTION_OPTIONS) as conn:
        claimed: list[Any] = []
        wait_until(
            lambda: bool(
                claimed.extend(app.queries.claim_jobs(conn, ClaimRequest(10**9, 10))) or claimed
            ),
            message="the claim of the first job",
        )
    assert [job.id for job in claimed] == [first.id]
    second = sync_account.delay(2)
    assert second.id != first.id and not second.existed
    assert _row(admin, app, first.id)[0] == [1]  # the running job kept its arguments
    assert _row(admin, app, second.id)[0] == [2]


def test_a_per_call_debounce_and_enqueue_many(app: App, admin: Connection) -> None:
    @app.task(name="notify")
    def notify(user: int, text: str) -> None: ...

    plain = [notify.delay(1, "a"), notify.delay(1, "b")]
    assert plain[0].id != plain[1].id
    calls = [
        notify.apply_async([1, text], debounce=timedelta(minutes=1), debounce_key="user:1")
        for text in ("c", "d")
    ]
    assert calls[0].id == calls[1].id
    specs = [notify.build_spec([2, text], debounce=_debounce("user:2")) for text in ("e", "f", "g")]
    handles = app.enqueue_many(specs)
    assert len({handle.id for handle in handles}) == 1
    assert _row(admin, app, handles[0].id)[0] == [2, "g"]
    assert _count(admin, app, "notify") == 4


def _debounce(key: str) -> Any:
    return Debounce(timedelta(minutes=1), key)


@pytest.fixture
def connections(dsn: str) -> Iterator[list[Connection]]:
    opened = [psycopg.connect(dsn, autocommit=True) for _ in range(THREADS)]
    yield opened
    for conn in opened:
        conn.close()


def test_twenty_concurrent_enqueues_make_one_job_and_the_last_arguments_win(
    app: App, admin: Connection, connections: list[Connection]
) -> None:
    @app.task(name="rebuild", debounce=timedelta(minutes=5), debounce_key="search-index")
    def rebuild(n: int) -> None: ...

    barrier = threading.Barrier(THREADS)

    def enqueue(index: int) -> tuple[int, int, int]:
        conn = connections[index]
        barrier.wait(timeout=10)
        with conn.transaction():
            handle = rebuild.apply_async([index], connection=conn)
            # Inside the enqueue's transaction (the key's lock still held): how many
            # enqueues this job had absorbed when this one wrote it is its turn.
            turn = select(
                conn,
                app,
                "SELECT (meta -> 'pgtasks.debounce' ->> 'replaced')::int"
                " FROM {schema}.jobs WHERE id = %s",
                (handle.id,),
            )[0][0]
        return handle.id, turn, index

    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(enqueue, range(THREADS)))

    assert len({job_id for job_id, _, _ in results}) == 1
    assert sorted(turn for _, turn, _ in results) == list(range(THREADS))
    last = next(index for _, turn, index in results if turn == THREADS - 1)
    args, _, _, debounce, _, _ = _row(admin, app, results[0][0])
    assert args == [last] and debounce["replaced"] == THREADS - 1
    assert _count(admin, app, "rebuild") == 1


def test_a_worker_runs_the_debounced_job_once_with_the_last_arguments(app: App) -> None:
    ran: list[int] = []

    @app.task(name="flush", debounce=timedelta(seconds=0.3), debounce_key="k")
    def flush(n: int) -> int:
        ran.append(n)
        return n

    handles = [flush.delay(n) for n in range(5)]
    with running_worker(app):
        assert handles[-1].get(timeout=10) == 4
    assert ran == [4]


def test_bad_debounce_options_are_refused_before_anything_is_written(
    app: App, admin: Connection
) -> None:
    with pytest.raises(TaskRegistrationError, match=r"debounce= must be a datetime\.timedelta"):
        app.task(name="bad1", debounce=5)(lambda: None)
    with pytest.raises(TaskRegistrationError, match="need debounce="):
        app.task(name="bad2", debounce_key="k")(lambda: None)
    with pytest.raises(TaskRegistrationError, match=r"debounce_max= .* must be at least"):
        app.task(name="bad3", debounce=timedelta(minutes=2), debounce_max=timedelta(minutes=1))(
            lambda: None
        )
    with pytest.raises(TaskRegistrationError, match="debounce_key= must be a str or a callable"):
        app.task(name="bad4", debounce=timedelta(seconds=1), debounce_key=3)(lambda: None)

    @app.task(name="fine", debounce=timedelta(seconds=1), debounce_key=lambda n: n)
    def fine(n: Any) -> None: ...

    with pytest.raises(ValueError, match="must return a str"):
        fine.delay(3)
    with pytest.raises(ValueError, match="cannot be combined with countdown="):
        fine.apply_async(["a"], countdown=5)
    with pytest.raises(ValueError, match="cannot be combined with idempotency_key="):
        fine.apply_async(["a"], idempotency_key="x")
    with pytest.raises(ValueError, match="debounce= must be a positive timedelta"):
        fine.apply_async(["a"], debounce=timedelta(0))
    with pytest.raises(ValueError, match="cannot be combined with link="):
        fine.apply_async(["a"], debounce=timedelta(seconds=1), link=fine.s())

    @app.task(name="limited", concurrency=1, debounce=timedelta(seconds=1))
    def limited() -> None: ...

    with pytest.raises(ValueError, match="concurrency or rate limits"):
        limited.delay()
    assert select(admin, app, "SELECT count(*) FROM {schema}.all_jobs") == [(0,)]


def test_async_enqueues_debounce_too_and_replacements_are_not_deduplications(
    app: App, admin: Connection
) -> None:
    @app.task(name="asynced", debounce=timedelta(minutes=1), debounce_key="one")
    def asynced(n: int) -> None: ...

    async def enqueue() -> list[int]:
        handles = [await asynced.aapply_async([n]) for n in range(3)]
        return [handle.id for handle in handles]

    ids = asyncio.run(enqueue())
    assert len(set(ids)) == 1 and _row(admin, app, ids[0])[0] == [2]
    assert app.counters.total("enqueues_deduplicated") == 0


def test_the_lookup_of_a_key_reads_jobs_debounce_idx(app: App, admin: Connection) -> None:
    @app.task(name="many_keys", debounce=timedelta(minutes=1))
    def many_keys(n: int) -> None: ...

    app.enqueue_many([many_keys.build_spec([n]) for n in range(1000)])
    execute(admin, app, "ANALYZE {schema}.jobs")
    statement = app.queries._statements["debounce_job"]
    params = {
        "task_name": "many_keys",
        "queue": "default",
        "priority": 0,
        "args": "[1]",
        "kwargs": "{}",
        "max_attempts": 3,
        "meta": None,
        "debounce_key": "k",
        "debounce": 60.0,
        "debounce_max": None,
    }
    with admin.cursor() as cursor:
        cursor.execute("BEGIN")
        try:
            plan = "\n".join(row[0] for row in cursor.execute(b"EXPLAIN " + statement, params))
        finally:
            cursor.execute("ROLLBACK")
    assert "jobs_debounce_idx" in plan, plan
