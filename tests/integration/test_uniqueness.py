"""Uniqueness scopes (unique_while="active", unique_for=) through every enqueue path, and
the errors of bad options. Lifecycle, concurrency, retry and beat: test_uniqueness_lifecycle.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from pgtasks import App, Task, TaskRegistrationError, UniquenessError
from pgtasks._app.schedules import build_spec
from pgtasks._jobs import ScopedJobSpec

Connection = psycopg.Connection[Any]
MINUTE = timedelta(minutes=1)


def rows(admin: Connection, app: App) -> list[dict[str, Any]]:
    query = sql.SQL(
        "SELECT id, status, idempotency_key, unique_key, unique_window, kwargs"
        " FROM {}.all_jobs ORDER BY id"
    ).format(sql.Identifier(app.schema))
    with admin.cursor(row_factory=dict_row) as cursor:
        return cursor.execute(query).fetchall()


def active_task(app: App, **options: Any) -> Task[..., None]:
    @app.task(name="sync_account", unique_while="active", **options)
    def sync_account(account_id: int, full: bool = False) -> None: ...

    return sync_account


def period_task(app: App, **options: Any) -> Task[..., None]:
    @app.task(name="send_digest", unique_for=MINUTE, **options)
    def send_digest(user_id: int) -> None: ...

    return send_digest


def by_account(account_id: int, full: bool = False) -> str:
    return f"account:{account_id}"


# -- single enqueues --
def test_active_scope_per_call_returns_the_pending_job_for_its_key(
    app: App, admin: Connection
) -> None:
    @app.task
    def report(day: str) -> None: ...

    first = report.apply_async(["mon"], idempotency_key="report", unique_while="active")
    again = report.apply_async(["tue"], idempotency_key="report", unique_while="active")
    other = report.apply_async(["mon"], idempotency_key="other", unique_while="active")

    assert (first.existed, again.existed, other.existed) == (False, True, False)
    assert again.id == first.id != other.id
    stored = rows(admin, app)
    keys = [(row["unique_key"], row["idempotency_key"], row["unique_window"]) for row in stored]
    assert keys == [
        ("report", None, None),
        ("other", None, None),
    ]


def test_task_option_takes_the_key_from_unique_key_of_the_arguments(
    app: App, admin: Connection
) -> None:
    sync_account = active_task(app, unique_key=by_account)

    first = sync_account.delay(7)
    again = sync_account.delay(account_id=7, full=True)
    other = sync_account.delay(8)
    explicit = sync_account.apply_async([7], idempotency_key="manual")

    assert again.id == first.id and again.existed
    assert len({first.id, other.id, explicit.id}) == 3
    assert [row["unique_key"] for row in rows(admin, app)] == ["account:7", "account:8", "manual"]


def test_period_scope_returns_the_job_of_the_same_window_whatever_its_status(
    app: App, admin: Connection
) -> None:
    send_digest = period_task(app, unique_key=lambda user_id: f"digest:{user_id}")

    first = send_digest.delay(1)
    first.cancel()
    again = send_digest.delay(1)

    assert again.id == first.id and again.existed
    (row,) = rows(admin, app)
    window = row["unique_window"]
    assert window.upper - window.lower == MINUTE
    assert window.lower.timestamp() % 60 == 0  # aligned to the epoch


def test_unique_key_without_a_scope_is_a_key_for_life(app: App, admin: Connection) -> None:
    @app.task(unique_key=lambda order_id: f"receipt:{order_id}")
    def send_receipt(order_id: int) -> None: ...

    first = send_receipt.delay(5)
    first.cancel()
    again = send_receipt.delay(5)

    assert again.id == first.id and again.existed
    assert [(row["idempotency_key"], row["unique_key"]) for row in rows(admin, app)] == [
        ("receipt:5", None)
    ]


def test_scopes_and_keys_for_life_are_separate_namespaces(app: App, admin: Connection) -> None:
    @app.task
    def job() -> None: ...

    handles = [
        job.apply_async(idempotency_key="k"),
        job.apply_async(idempotency_key="k", unique_while="active"),
        job.apply_async(idempotency_key="k", unique_for=MINUTE),
        job.apply_async(idempotency_key="k", unique_for=2 * MINUTE),
    ]

    assert len({handle.id for handle in handles}) == 4
    assert not any(handle.existed for handle in handles)


def test_a_call_scope_replaces_the_tasks(app: App) -> None:
    sync_account = active_task(app, unique_key=by_account)

    active = sync_account.delay(1)
    periodic = sync_account.apply_async([1], unique_for=MINUTE)
    periodic_again = sync_account.apply_async([1], unique_for=MINUTE)

    assert periodic.id != active.id
    assert periodic_again.id == periodic.id and periodic_again.existed


# -- bulk, transactional and async enqueues --
def test_delay_many_sends_each_key_once_and_answers_in_order(app: App, admin: Connection) -> None:
    sync_account = active_task(app, unique_key=by_account)
    existing = sync_account.delay(1)

    handles = sync_account.delay_many([{"account_id": 1}, {"account_id": 2}, ((2,), {})])

    assert [handle.existed for handle in handles] == [True, False, True]
    assert handles[0].id == existing.id and handles[1].id == handles[2].id
    assert len(rows(admin, app)) == 2


def test_enqueue_many_mixes_plain_keyed_and_scoped_jobs_in_one_transaction(
    app: App, admin: Connection
) -> None:
    sync_account = active_task(app, unique_key=by_account)
    send_digest = period_task(app, unique_key=lambda user_id: f"digest:{user_id}")

    @app.task
    def plain(n: int) -> None: ...

    specs = [
        plain.build_spec((1,)),
        sync_account.build_spec((1,)),
        send_digest.build_spec((1,)),
        plain.build_spec((2,), idempotency_key="life"),
        sync_account.build_spec((1,)),
        send_digest.build_spec((1,)),
        plain.build_spec((3,), idempotency_key="life"),
    ]
    handles = app.enqueue_many(specs)

    assert [handle.existed for handle in handles] == [False, False, False, False, True, True, True]
    assert handles[4].id == handles[1].id and handles[5].id == handles[2].id
    assert handles[6].id == handles[3].id
    assert len(rows(admin, app)) == 4
    # A batch that fails in its last group writes none of its groups.
    broken = dataclasses.replace(send_digest.build_spec((9,)), max_attempts=0)
    with pytest.raises(psycopg.errors.CheckViolation):
        app.enqueue_many([plain.build_spec((4,)), sync_account.build_spec((9,)), broken])
    assert len(rows(admin, app)) == 4


def test_transactional_enqueue_commits_and_rolls_back_with_the_callers_transaction(
    app: App, admin: Connection, dsn: str
) -> None:
    sync_account = active_task(app, unique_key=by_account)
    send_digest = period_task(app, unique_key=lambda user_id: f"digest:{user_id}")

    with psycopg.connect(dsn) as conn:
        app.check_schema()
        sync_account.apply_async([1], connection=conn)
        send_digest.delay_many([{"user_id": 1}, {"user_id": 1}], connection=conn)
        conn.rollback()
        assert rows(admin, app) == []
        first = sync_account.apply_async([1], connection=conn)
        digests = send_digest.delay_many([{"user_id": 1}, {"user_id": 2}], connection=conn)
        again = sync_account.apply_async([1], connection=conn)
        conn.commit()

    assert again.id == first.id and again.existed
    assert [handle.existed for handle in digests] == [False, False]
    assert len(rows(admin, app)) == 3


def test_async_enqueues_honour_scopes(app: App) -> None:
    sync_account = active_task(app, unique_key=by_account)

    @app.task
    def plain() -> None: ...

    async def main() -> list[tuple[int, bool]]:
        try:
            one = await sync_account.adelay(3)
            two = await sync_account.aapply_async([4], idempotency_key="account:3")
            many = await sync_account.adelay_many([{"account_id": 3}, {"account_id": 5}])
            period = await sync_account.aapply_async([3], unique_for=MINUTE)
            specs = [sync_account.build_spec((3,)), plain.build_spec(idempotency_key="x")]
            mixed = await app.aenqueue_many([*specs, plain.build_spec()])
            assert [job.existed for job in mixed] == [True, False, False]
            return [(job.id, job.existed) for job in (one, two, *many, period)]
        finally:
            await app.aclose()

    (one, two, three, four, period) = asyncio.run(main())
    assert two == (one[0], True) and three == (one[0], True)
    assert not four[1] and not period[1] and len({one[0], four[0], period[0]}) == 3


# -- bad input --
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique_while": "done"}, "unique_while= must be 'active'"),
        ({"unique_while": True}, "unique_while= must be 'active'"),
        ({"unique_for": 300}, "unique_for= must be a datetime.timedelta"),
        ({"unique_for": timedelta(0)}, "unique_for= must be a positive timedelta"),
        ({"unique_for": timedelta(seconds=-5)}, "unique_for= must be a positive timedelta"),
        ({"unique_for": timedelta(days=20000)}, "unique_for= must be at most"),
        (
            {"unique_while": "active", "unique_for": MINUTE},
            "unique_while='active' and unique_for= cannot be combined",
        ),
        ({"unique_key": "account"}, "unique_key= must be a callable"),
    ],
)
def test_bad_task_options_fail_at_registration(
    make_app: Callable[..., App], options: dict[str, Any], message: str
) -> None:
    app = make_app(migrate=False)
    with pytest.raises(TaskRegistrationError, match=message) as caught:
        app.task(name="bad", **options)(lambda: None)
    assert "task 'bad'" in str(caught.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique_while": "always", "idempotency_key": "k"}, "unique_while= must be 'active'"),
        ({"unique_for": 5, "idempotency_key": "k"}, "unique_for= must be a datetime.timedelta"),
        ({"unique_for": -MINUTE, "idempotency_key": "k"}, "must be a positive timedelta"),
        (
            {"unique_while": "active", "unique_for": MINUTE, "idempotency_key": "k"},
            "cannot be combined",
        ),
        ({"unique_while": "active"}, "unique_while='active' needs a key"),
        ({"unique_for": MINUTE}, "needs a key: pass idempotency_key="),
    ],
)
def test_bad_call_options_raise_before_anything_is_written(
    app: App, admin: Connection, options: dict[str, Any], message: str
) -> None:
    @app.task
    def job() -> None: ...

    with pytest.raises(UniquenessError, match=message):
        job.apply_async(**options)
    assert rows(admin, app) == []


def test_bad_keys_from_unique_key_raise_and_write_nothing(app: App, admin: Connection) -> None:
    scoped_without_key = active_task(app)

    @app.task(unique_while="active", unique_key=lambda n: n)
    def not_text(n: int) -> None: ...

    @app.task(unique_while="active", unique_key=lambda n: f"k:{1 // n}")
    def raising(n: int) -> None: ...

    with pytest.raises(UniquenessError, match=r"needs a key.*unique_key="):
        scoped_without_key.delay(1)
    with pytest.raises(UniquenessError, match="needs a key"):
        scoped_without_key.delay_many([{"account_id": 1}])
    with pytest.raises(UniquenessError, match="must return a str, got 3"):
        not_text.delay(3)
    with pytest.raises(UniquenessError, match="raised ZeroDivisionError"):
        raising.delay(0)

    @app.task(unique_while="active", unique_key=lambda: "a\x00")
    def nul() -> None: ...

    with pytest.raises(UniquenessError, match="unique_key"):
        nul.delay()
    assert rows(admin, app) == []


def test_scoped_jobs_keep_their_meta(app: App, admin: Connection) -> None:
    sync_account = active_task(app, unique_key=by_account)

    one = sync_account.apply_async([1], meta={"source": "api"})
    many = sync_account.delay_many([{"account_id": 2}, {"account_id": 3}], meta={"batch": 7})
    periodic = sync_account.apply_async([1], unique_for=MINUTE, meta={"source": "cron"})
    bare = sync_account.delay(4)

    assert one.fetch().meta == {"source": "api"}
    assert [job.fetch().meta for job in many] == [{"batch": 7}, {"batch": 7}]
    assert periodic.fetch().meta == {"source": "cron"}
    assert bare.fetch().meta == {}


def test_a_scoped_periodic_task_keys_its_scope_by_unique_key_or_the_schedule_name(
    app: App,
) -> None:
    @app.task(name="digest", unique_for=MINUTE, unique_key=lambda team: f"digest:{team}")
    def digest(team: str) -> None: ...

    @app.task(name="rollup", unique_while="active")
    def rollup() -> None: ...

    @app.task(name="plain")
    def plain() -> None: ...

    tick = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
    specs = {
        name: build_spec(task, app.add_periodic(task, every=MINUTE, **options), tick)
        for name, task, options in [
            ("digest", digest, {"args": ["red"]}),
            ("rollup", rollup, {"name": "nightly-rollup"}),
            ("plain", plain, {}),
        ]
    }

    assert isinstance(specs["digest"], ScopedJobSpec)
    assert (specs["digest"].unique_key, specs["digest"].unique_for) == ("digest:red", MINUTE)
    assert isinstance(specs["rollup"], ScopedJobSpec)
    assert (specs["rollup"].unique_key, specs["rollup"].unique_for) == ("nightly-rollup", None)
    assert not isinstance(specs["plain"], ScopedJobSpec)
    for spec in specs.values():  # each tick keeps its key for life
        assert (spec.idempotency_key or "").startswith("pgtasks.periodic:")


# -- with concurrency and rate limits --
@pytest.mark.parametrize("scope", [{"unique_while": "active"}, {"unique_for": MINUTE}])
def test_a_scoped_job_keeps_its_limits_through_every_path(
    app: App, admin: Connection, scope: dict[str, Any]
) -> None:
    @app.task(
        name="limited",
        unique_key=lambda user_id: f"user:{user_id}",
        concurrency_key=lambda user_id: user_id,
        concurrency=1,
        **scope,
    )
    def limited(user_id: int) -> None: ...

    limited.delay(1)
    limited.delay_many([((2,), {}), ((3,), {})])

    async def enqueue_async() -> None:
        await limited.adelay(4)

    asyncio.run(enqueue_async())
    query = sql.SQL(
        "SELECT unique_key, limit_groups, limit_key FROM {}.all_jobs ORDER BY id"
    ).format(sql.Identifier(app.schema))
    found = [tuple(row) for row in admin.execute(query).fetchall()]
    assert [row[0] for row in found] == ["user:1", "user:2", "user:3", "user:4"]
    assert [row[2] for row in found] == ["1", "2", "3", "4"]
    assert all(row[1] and any(name.startswith("key:") for name in row[1]) for row in found), found
