"""Enqueueing jobs: every App/Task enqueue path against the real PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import select
import shutil
import socket
import tempfile
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg import conninfo, sql

from pgtasks import (
    App,
    JobHandle,
    JobNotFoundError,
    JobRow,
    JobStatus,
    NaiveDatetimeError,
    PayloadNotSerializableError,
    PayloadTooLargeError,
    Task,
    UnknownTaskError,
)
from pgtasks._store.inserts import BULK_CHUNK
from tests.support.waiting import wait_until

T = TypeVar("T")
Connection = psycopg.Connection[Any]
SendEmail = Task[..., str]


def run(app: App, make_coroutine: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine on a fresh event loop, closing the app's async pool on that loop."""

    async def main() -> T:
        try:
            return await make_coroutine()
        finally:
            await app.aclose()

    return asyncio.run(main())


def count_jobs(admin: Connection, app: App) -> int:
    query = sql.SQL("SELECT count(*) FROM {}.all_jobs").format(sql.Identifier(app.schema))
    row = admin.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def db_now(admin: Connection) -> datetime:
    row = admin.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def db_row(admin: Connection, app: App, job_id: int) -> dict[str, Any]:
    query = sql.SQL(
        "SELECT *, run_at - created_at AS delay, xmin::text AS xid FROM {}.jobs WHERE id = %s"
    ).format(sql.Identifier(app.schema))
    with admin.cursor(row_factory=psycopg.rows.dict_row) as cursor:
        row = cursor.execute(query, (job_id,)).fetchone()
    assert row is not None, f"job {job_id} not in the table"
    return row


@pytest.fixture
def send_email(app: App) -> SendEmail:
    @app.task(name="emails.send", queue="emails", priority=3, max_attempts=7)
    def send_email(to: str, subject: str = "hi") -> str:
        return f"sent {subject} to {to}"

    return send_email


# -- delay, status, fetch --------------------------------------------------------------------------
def test_delay_inserts_a_pending_job_and_returns_its_handle(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    before = db_now(admin)

    job = send_email.delay("a@example.com", subject="welcome")

    assert isinstance(job, JobHandle)
    assert isinstance(job.id, int)
    assert job.existed is False
    row = db_row(admin, app, job.id)
    assert row["task_name"] == "emails.send"
    assert (row["queue"], row["priority"], row["max_attempts"]) == ("emails", 3, 7)
    assert (row["args"], row["kwargs"]) == (["a@example.com"], {"subject": "welcome"})
    assert (row["status"], row["attempts"]) == ("pending", 0)
    assert row["run_at"] == row["created_at"] >= before
    assert row["idempotency_key"] is None
    assert row["locked_by"] is None and row["finished_at"] is None


def test_status_reads_the_current_status_fresh_from_the_database(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    job = send_email.delay("a@example.com")
    assert job.status() is JobStatus.PENDING
    assert job.status() == "pending"

    query = sql.SQL("UPDATE {}.jobs SET status = 'cancelled' WHERE id = %s")
    admin.execute(query.format(sql.Identifier(app.schema)), (job.id,))

    assert job.status() is JobStatus.CANCELLED
    assert str(job.status()) == "cancelled"


def test_fetch_returns_a_snapshot_of_the_whole_row(app: App, send_email: SendEmail) -> None:
    job = send_email.apply_async(("a@example.com",), {"subject": "x"}, idempotency_key="k1")

    row = job.fetch()

    assert isinstance(row, JobRow)
    assert row.id == job.id
    assert (row.task_name, row.queue, row.status) == ("emails.send", "emails", JobStatus.PENDING)
    assert (row.args, row.kwargs, row.idempotency_key) == (
        ["a@example.com"],
        {"subject": "x"},
        "k1",
    )
    assert row.run_at.tzinfo is not None


def test_async_status_and_fetch_read_the_same_row(app: App, send_email: SendEmail) -> None:
    job = send_email.delay("a@example.com")

    status, row = run(app, lambda: asyncio.gather(job.astatus(), job.afetch()))

    assert status is JobStatus.PENDING
    assert row == job.fetch()


def test_get_job_returns_a_handle_for_an_existing_id(app: App, send_email: SendEmail) -> None:
    job = send_email.delay("a@example.com")

    found = app.get_job(job.id)

    assert found == job
    assert found.status() is JobStatus.PENDING
    assert run(app, lambda: app.aget_job(job.id)) == job


def test_get_job_of_a_missing_id_raises_job_not_found(app: App) -> None:
    with pytest.raises(JobNotFoundError, match="job 424242 does not exist"):
        app.get_job(424242)
    with pytest.raises(LookupError):
        run(app, lambda: app.aget_job(424242))


def test_handle_of_a_deleted_job_raises_job_not_found(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    job = send_email.delay("a@example.com")
    query = sql.SQL("DELETE FROM {}.jobs WHERE id = %s").format(sql.Identifier(app.schema))
    admin.execute(query, (job.id,))

    with pytest.raises(JobNotFoundError, match=f"job {job.id} does not exist"):
        job.status()
    with pytest.raises(JobNotFoundError):
        job.fetch()
    with pytest.raises(JobNotFoundError):
        run(app, job.astatus)


# -- scheduling ------------------------------------------------------------------------------------
def test_apply_at_an_aware_datetime_stores_that_instant(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    plus_five = timezone(timedelta(hours=5))
    when = datetime(2031, 3, 4, 17, 30, 15, 123456, tzinfo=plus_five)

    job = send_email.apply_at(when, "a@example.com")

    run_at = db_row(admin, app, job.id)["run_at"]
    assert run_at == when
    assert run_at.astimezone(timezone.utc).hour == 12


def test_apply_at_a_timedelta_counts_from_the_database_clock(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    before = db_now(admin)

    job = send_email.apply_at(timedelta(hours=1), "a@example.com")

    after = db_now(admin)
    row = db_row(admin, app, job.id)
    # Same statement, same now(): run_at is exactly one hour after the server's insert time.
    assert row["delay"] == timedelta(hours=1)
    assert before + timedelta(hours=1) <= row["run_at"] <= after + timedelta(hours=1)


@pytest.mark.parametrize(
    "enqueue",
    [
        lambda task, when: task.apply_at(when, "a@example.com"),
        lambda task, when: task.apply_async(("a@example.com",), eta=when),
    ],
    ids=["apply_at", "apply_async-eta"],
)
def test_naive_datetime_is_rejected_before_anything_is_written(
    app: App,
    admin: Connection,
    send_email: SendEmail,
    enqueue: Callable[[SendEmail, datetime], Any],
) -> None:
    with pytest.raises(ValueError, match="naive datetime") as caught:
        enqueue(send_email, datetime(2031, 1, 1, 12, 0))

    assert isinstance(caught.value, NaiveDatetimeError)
    assert "timezone.utc" in str(caught.value)
    assert count_jobs(admin, app) == 0


def test_apply_at_rejects_something_that_is_not_a_time(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    with pytest.raises(TypeError, match="aware datetime or a timedelta"):
        send_email.apply_at(60, "a@example.com")  # type: ignore[arg-type]
    assert count_jobs(admin, app) == 0


# -- apply_async options ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "countdown", [90, 90.0, timedelta(seconds=90)], ids=["int", "float", "timedelta"]
)
def test_apply_async_countdown_delays_from_the_database_clock(
    app: App, admin: Connection, send_email: SendEmail, countdown: Any
) -> None:
    job = send_email.apply_async(("a@example.com",), countdown=countdown)

    assert db_row(admin, app, job.id)["delay"] == timedelta(seconds=90)


def test_apply_async_eta_stores_that_instant(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    eta = datetime(2030, 6, 1, 8, 0, tzinfo=timezone.utc)

    job = send_email.apply_async(("a@example.com",), eta=eta)

    assert db_row(admin, app, job.id)["run_at"] == eta


def test_apply_async_rejects_countdown_and_eta_together(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    with pytest.raises(ValueError, match="countdown= or eta=, not both"):
        send_email.apply_async(("a@example.com",), countdown=5, eta=datetime.now(timezone.utc))
    assert count_jobs(admin, app) == 0


def test_apply_async_options_override_the_task_defaults(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    job = send_email.apply_async(
        args=["a@example.com"],
        kwargs={"subject": "bulk"},
        priority=-5,
        queue="bulk",
        max_attempts=2,
        idempotency_key="newsletter:2024-05",
    )

    row = db_row(admin, app, job.id)
    assert (row["priority"], row["queue"], row["max_attempts"]) == (-5, "bulk", 2)
    assert row["idempotency_key"] == "newsletter:2024-05"
    assert (row["args"], row["kwargs"]) == (["a@example.com"], {"subject": "bulk"})


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"priority": 2**31}, ValueError, "32-bit"),
        ({"priority": "high"}, TypeError, "priority must be an int"),
        ({"priority": True}, TypeError, "priority must be an int"),
        ({"queue": ""}, ValueError, "queue must be a non-empty string"),
        ({"queue": "   "}, ValueError, "queue must be a non-empty string"),
        ({"max_attempts": 0}, ValueError, "max_attempts must be an int >= 1"),
        ({"idempotency_key": ""}, ValueError, "idempotency_key must be a non-empty string"),
        ({"countdown": "10"}, TypeError, "countdown must be seconds"),
        ({"eta": "tomorrow"}, TypeError, "eta must be an aware datetime"),
        ({"args": "ab"}, TypeError, "args must be a list or tuple"),
        ({"kwargs": ["to"]}, TypeError, "kwargs must be a mapping"),
    ],
)
def test_apply_async_rejects_bad_options_before_anything_is_written(
    app: App,
    admin: Connection,
    send_email: SendEmail,
    options: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    options.setdefault("args", ("a@example.com",))

    with pytest.raises(error, match=message):
        send_email.apply_async(**options)
    assert count_jobs(admin, app) == 0


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": 2**31},
        {"countdown": float("nan")},
        {"countdown": 1e300},
        {"queue": "a\x00b"},
        {"idempotency_key": "key\x00"},
    ],
    ids=["max-attempts-range", "countdown-nan", "countdown-huge", "queue-nul", "key-nul"],
)
def test_apply_async_rejects_values_the_database_cannot_store_with_a_clear_error(
    app: App, admin: Connection, send_email: SendEmail, options: dict[str, Any]
) -> None:
    with pytest.raises(ValueError, match="|".join(options)):
        send_email.apply_async(("a@example.com",), **options)
    assert count_jobs(admin, app) == 0


def test_send_task_enqueues_a_registered_task_by_name(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    job = app.send_task("emails.send", ["a@example.com"], {"subject": "s"}, queue="other")

    row = db_row(admin, app, job.id)
    assert (row["task_name"], row["queue"], row["args"]) == (
        "emails.send",
        "other",
        ["a@example.com"],
    )


def test_send_task_with_an_unknown_name_raises_unknown_task(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    with pytest.raises(UnknownTaskError, match=r"'emails\.sned'") as caught:
        app.send_task("emails.sned", ["a@example.com"])

    assert "known: emails.send" in str(caught.value)
    assert isinstance(caught.value, KeyError)
    assert count_jobs(admin, app) == 0


# -- bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "enqueue",
    [
        lambda task: task.delay(),
        lambda task: task.delay("a@example.com", "subject", "extra"),
        lambda task: task.delay("a@example.com", body="unexpected"),
        lambda task: task.delay("a@example.com", to="twice"),
        lambda task: task.apply_async(kwargs={1: "not a name"}),
        lambda task: task.delay_many([{"to": "ok"}, {"too": "typo"}]),
        lambda task: task.delay_many([(("ok",), {}), (("a", "b", "c"), {})]),
    ],
    ids=[
        "missing",
        "too-many",
        "unexpected-keyword",
        "twice",
        "non-str-keyword",
        "many-bad-item",
        "many-bad-pair",
    ],
)
def test_arguments_not_matching_the_signature_raise_type_error_and_write_nothing(
    app: App,
    admin: Connection,
    send_email: SendEmail,
    enqueue: Callable[[Any], Any],
) -> None:
    with pytest.raises(TypeError):
        enqueue(send_email)
    assert count_jobs(admin, app) == 0


def test_signature_error_names_the_task(send_email: SendEmail) -> None:
    with pytest.raises(TypeError, match=r"arguments do not match task 'emails.send'.*'to'"):
        send_email.delay()


@pytest.mark.parametrize(
    ("enqueue", "culprit"),
    [
        (lambda task: task.delay({1, 2}), "'to' (position 0)"),
        (lambda task: task.delay("a@example.com", subject=object()), "'subject'"),
        (lambda task: task.delay_many([{"to": "ok"}, {"to": b"bytes"}]), "'to'"),
        (lambda task: task.apply_async(["a"], {"subject": float("nan")}), "'subject'"),
    ],
    ids=["positional", "keyword", "delay_many", "nan"],
)
def test_non_json_argument_raises_type_error_naming_it_and_writes_nothing(
    app: App,
    admin: Connection,
    send_email: SendEmail,
    enqueue: Callable[[Any], Any],
    culprit: str,
) -> None:
    with pytest.raises(TypeError) as caught:
        enqueue(send_email)

    assert isinstance(caught.value, PayloadNotSerializableError)
    assert culprit in str(caught.value)
    assert count_jobs(admin, app) == 0


def test_payload_over_the_app_limit_raises_and_writes_nothing(
    make_app: Callable[..., App], admin: Connection
) -> None:
    app = make_app(max_payload_bytes=200)

    @app.task
    def store(blob: str) -> None: ...

    store.delay("x" * 150)
    with pytest.raises(PayloadTooLargeError, match="limit of 200 bytes"):
        store.delay("x" * 250)
    with pytest.raises(PayloadTooLargeError):
        store.delay_many([{"blob": "small"}, {"blob": "é" * 120}])
    assert count_jobs(admin, app) == 1


# -- bulk ------------------------------------------------------------------------------------------
def test_delay_many_returns_handles_in_the_order_of_the_items(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    items: list[Any] = [
        {"to": "kw@example.com"},
        (["pos@example.com"], {"subject": "pair"}),
        (("tuple@example.com", "both"), {}),
        {"to": "last@example.com", "subject": "z"},
    ]

    jobs = send_email.delay_many(items)

    rows = [db_row(admin, app, job.id) for job in jobs]
    assert [(row["args"], row["kwargs"]) for row in rows] == [
        ([], {"to": "kw@example.com"}),
        (["pos@example.com"], {"subject": "pair"}),
        (["tuple@example.com", "both"], {}),
        ([], {"to": "last@example.com", "subject": "z"}),
    ]
    assert len({row["xid"] for row in rows}) == 1  # one transaction
    assert not any(job.existed for job in jobs)


def test_delay_many_of_nothing_returns_nothing(send_email: SendEmail) -> None:
    assert send_email.delay_many([]) == []


def test_delay_many_rejects_items_of_the_wrong_shape(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    with pytest.raises(TypeError, match="kwargs dict or an \\(args, kwargs\\) pair"):
        send_email.delay_many([{"to": "ok"}, ["a@example.com"]])  # type: ignore[list-item]
    assert count_jobs(admin, app) == 0


def test_delay_many_over_one_chunk_writes_every_row_in_one_transaction(
    app: App, admin: Connection
) -> None:
    @app.task
    def index(n: int) -> None: ...

    count = BULK_CHUNK * 2 + 7

    jobs = index.delay_many({"n": n} for n in range(count))

    assert len(jobs) == count
    query = sql.SQL("SELECT id, kwargs->>'n', xmin::text FROM {}.jobs").format(
        sql.Identifier(app.schema)
    )
    rows = {job_id: (int(n), xid) for job_id, n, xid in admin.execute(query).fetchall()}
    assert len(rows) == count
    assert [rows[job.id][0] for job in jobs] == list(range(count))
    assert len({xid for _, xid in rows.values()}) == 1


def test_a_failure_in_a_later_chunk_writes_none_of_the_batch(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    good = send_email.build_spec(("a@example.com",))
    broken = dataclasses.replace(send_email.build_spec(("b@example.com",)), args_json="[oops")

    with pytest.raises(psycopg.DataError):
        app.enqueue_many([good] * (BULK_CHUNK + 1) + [broken])
    assert count_jobs(admin, app) == 0


def test_adelay_many_returns_handles_in_order(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    jobs = run(app, lambda: send_email.adelay_many([{"to": f"{n}@x"} for n in range(5)]))

    assert [db_row(admin, app, job.id)["kwargs"]["to"] for job in jobs] == [
        f"{n}@x" for n in range(5)
    ]


# -- async enqueue ---------------------------------------------------------------------------------
def test_adelay_inserts_a_pending_job(app: App, admin: Connection, send_email: SendEmail) -> None:
    job = run(app, lambda: send_email.adelay("a@example.com", subject="async"))

    row = db_row(admin, app, job.id)
    assert (row["args"], row["kwargs"], row["status"]) == (
        ["a@example.com"],
        {"subject": "async"},
        "pending",
    )


def test_aapply_at_accepts_a_timedelta_and_an_aware_datetime(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    when = datetime(2031, 1, 1, tzinfo=timezone.utc)

    async def both() -> tuple[JobHandle[str], JobHandle[str]]:
        later = await send_email.aapply_at(timedelta(minutes=5), "a@example.com")
        fixed = await send_email.aapply_at(when, "b@example.com")
        return later, fixed

    later, fixed = run(app, both)

    assert db_row(admin, app, later.id)["delay"] == timedelta(minutes=5)
    assert db_row(admin, app, fixed.id)["run_at"] == when
    with pytest.raises(NaiveDatetimeError):
        run(app, lambda: send_email.aapply_at(datetime(2031, 1, 1), "c@example.com"))
    assert count_jobs(admin, app) == 2


def test_aapply_async_accepts_every_option(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    job = run(
        app,
        lambda: send_email.aapply_async(
            ["a@example.com"],
            {"subject": "s"},
            countdown=30,
            priority=9,
            queue="bulk",
            max_attempts=1,
            idempotency_key="async-key",
        ),
    )

    row = db_row(admin, app, job.id)
    assert (row["priority"], row["queue"], row["max_attempts"]) == (9, "bulk", 1)
    assert (row["idempotency_key"], row["delay"]) == ("async-key", timedelta(seconds=30))
    again = run(app, lambda: send_email.aapply_async(["x"], idempotency_key="async-key"))
    assert (again.id, again.existed) == (job.id, True)


def test_async_enqueue_validates_before_anything_is_written(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    with pytest.raises(TypeError):
        run(app, lambda: send_email.adelay(object()))
    assert count_jobs(admin, app) == 0


# -- idempotency keys ------------------------------------------------------------------------------
def test_existing_idempotency_key_returns_the_existing_job_and_inserts_nothing(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    first = send_email.apply_async(("first@example.com",), idempotency_key="welcome:42")

    second = send_email.apply_async(
        ("second@example.com",), idempotency_key="welcome:42", queue="other", priority=99
    )

    assert first.existed is False
    assert (second.id, second.existed) == (first.id, True)
    assert count_jobs(admin, app) == 1
    row = db_row(admin, app, first.id)
    assert (row["args"], row["queue"], row["priority"]) == (["first@example.com"], "emails", 3)


@pytest.mark.parametrize("status", ["running", "done", "failed", "cancelled"])
def test_idempotency_key_matches_a_job_in_any_status(
    app: App, admin: Connection, send_email: SendEmail, status: str
) -> None:
    first = send_email.apply_async(("a@example.com",), idempotency_key="once")
    query = sql.SQL("UPDATE {}.jobs SET status = %s, attempts = 1 WHERE id = %s")
    admin.execute(query.format(sql.Identifier(app.schema)), (status, first.id))

    again = send_email.apply_async(("a@example.com",), idempotency_key="once")

    assert (again.id, again.existed) == (first.id, True)
    assert again.status() == status
    assert count_jobs(admin, app) == 1


@pytest.mark.parametrize("blocker_outcome", ["rollback", "commit"])
def test_twenty_threads_enqueuing_one_key_at_once_get_one_row(
    make_app: Callable[..., App], admin: Connection, dsn: str, blocker_outcome: str
) -> None:
    app = make_app(pool_min_size=20, pool_max_size=20)

    @app.task
    def charge(order_id: int) -> None: ...

    key = "charge:order-7"
    insert = sql.SQL(
        "INSERT INTO {}.jobs (task_name, queue, args, kwargs, max_attempts, idempotency_key)"
        " VALUES ('blocker', 'default', '[]', '{{}}', 1, %s) RETURNING id"
    ).format(sql.Identifier(app.schema))
    waiting = sql.SQL(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE wait_event_type = 'Lock' AND strpos(query, {}) > 0"
    ).format(sql.Literal(f'"{app.schema}".jobs'))
    barrier = threading.Barrier(21)

    def enqueue(thread: int) -> JobHandle[None]:
        barrier.wait(timeout=10)
        return charge.apply_async((thread,), idempotency_key=key)

    # An uncommitted row holding the key makes all 20 inserts wait on the unique index,
    # then race for the key together the moment it is released.
    with psycopg.connect(dsn) as blocker, ThreadPoolExecutor(max_workers=20) as pool:
        blocker_row = blocker.execute(insert, (key,)).fetchone()
        assert blocker_row is not None
        futures = [pool.submit(enqueue, thread) for thread in range(20)]
        barrier.wait(timeout=10)
        wait_until(
            lambda: admin.execute(waiting).fetchone() == (20,),
            message="20 enqueuers waiting on the key",
        )
        getattr(blocker, blocker_outcome)()
        jobs = [future.result(timeout=10) for future in futures]

    assert len({job.id for job in jobs}) == 1
    query = sql.SQL("SELECT count(*) FROM {}.all_jobs WHERE idempotency_key = %s")
    row = admin.execute(query.format(sql.Identifier(app.schema)), (key,)).fetchone()
    assert row == (1,)
    if blocker_outcome == "commit":
        assert jobs[0].id == blocker_row[0]
        assert all(job.existed for job in jobs)
    else:
        assert sum(not job.existed for job in jobs) == 1
        assert count_jobs(admin, app) == 1


def test_duplicate_keys_inside_one_batch_insert_one_row(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    existing = send_email.apply_async(("old@example.com",), idempotency_key="old")
    specs = [
        send_email.build_spec(("a@example.com",), idempotency_key="dup"),
        send_email.build_spec(("b@example.com",)),
        send_email.build_spec(("c@example.com",), idempotency_key="dup"),
        send_email.build_spec(("d@example.com",), idempotency_key="old"),
        send_email.build_spec(("e@example.com",), idempotency_key="dup"),
    ]

    jobs = app.enqueue_many(specs)

    assert [job.existed for job in jobs] == [False, False, True, True, True]
    assert jobs[0].id == jobs[2].id == jobs[4].id
    assert jobs[3].id == existing.id
    assert len({jobs[0].id, jobs[1].id, existing.id}) == 3
    assert count_jobs(admin, app) == 3
    assert db_row(admin, app, jobs[0].id)["args"] == ["a@example.com"]


def test_duplicate_keys_in_different_chunks_of_one_batch_insert_one_row(
    app: App, admin: Connection, send_email: SendEmail
) -> None:
    filler = [send_email.build_spec((f"{n}@x",)) for n in range(BULK_CHUNK - 1)]
    keyed = send_email.build_spec(("k@x",), idempotency_key="across")

    jobs = app.enqueue_many([keyed, *filler, send_email.build_spec(("z@x",)), keyed])

    assert jobs[0].id == jobs[-1].id
    assert (jobs[0].existed, jobs[-1].existed) == (False, True)
    assert count_jobs(admin, app) == BULK_CHUNK + 1


# -- transactional enqueue -------------------------------------------------------------------------
def test_enqueue_with_a_connection_is_visible_only_after_commit(
    app: App, admin: Connection, dsn: str, send_email: SendEmail
) -> None:
    with psycopg.connect(dsn) as conn:
        job = send_email.apply_async(("a@example.com",), connection=conn)
        many = send_email.delay_many([{"to": "b@example.com"}], connection=conn)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert count_jobs(admin, app) == 0
        with pytest.raises(JobNotFoundError):
            app.get_job(job.id)

        conn.commit()

    assert count_jobs(admin, app) == 2
    assert app.get_job(job.id).status() is JobStatus.PENDING
    assert many[0].status() is JobStatus.PENDING


def test_enqueue_with_a_connection_disappears_on_rollback(
    app: App, admin: Connection, dsn: str, send_email: SendEmail
) -> None:
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        pytest.raises(RuntimeError, match="order failed"),
        conn.transaction(),
    ):
        conn.execute("SELECT 1")  # the caller's own business writes
        job = send_email.apply_async(("a@example.com",), connection=conn)
        send_email.delay_many([{"to": f"{n}@x"} for n in range(3)], connection=conn)
        raise RuntimeError("order failed")

    assert count_jobs(admin, app) == 0
    with pytest.raises(JobNotFoundError):
        job.status()


def test_enqueue_with_an_async_connection_follows_its_transaction(
    app: App, admin: Connection, dsn: str, send_email: SendEmail
) -> None:
    async def scenario() -> tuple[int, int, int]:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            await send_email.aapply_async(("kept@example.com",), connection=conn)
            await send_email.adelay_many([{"to": "kept2@example.com"}], connection=conn)
            before_commit = count_jobs(admin, app)
            await conn.commit()
            after_commit = count_jobs(admin, app)
            await send_email.aapply_async(("dropped@example.com",), connection=conn)
            await conn.rollback()
            return before_commit, after_commit, count_jobs(admin, app)

    assert run(app, scenario) == (0, 2, 2)


# -- notifications ---------------------------------------------------------------------------------
def test_enqueue_notifies_the_schema_channel_with_the_queue_name(
    app: App, send_email: SendEmail, notifications: Callable[[str], list[str]]
) -> None:
    assert app.queries.channel == f"pgtasks.{app.schema}"

    send_email.delay("a@example.com")

    assert notifications("emails") == ["emails"]


def test_delayed_and_rolled_back_jobs_do_not_notify(
    app: App, dsn: str, send_email: SendEmail, notifications: Callable[[str], list[str]]
) -> None:
    send_email.apply_at(timedelta(minutes=5), "later@example.com")
    send_email.apply_async(("later@example.com",), queue="future", countdown=60)
    with psycopg.connect(dsn) as conn:
        send_email.apply_async(("a@example.com",), queue="rolled-back", connection=conn)
        conn.rollback()

    send_email.apply_async(("now@example.com",), queue="marker")

    assert notifications("marker") == ["marker"]


def test_one_batch_notifies_each_queue_once(
    app: App, send_email: SendEmail, notifications: Callable[[str], list[str]]
) -> None:
    specs = [
        send_email.build_spec((f"{n}@x",), queue=queue)
        for n, queue in enumerate(["a", "b", "a", "b", "a"])
    ]
    app.enqueue_many(specs)
    send_email.apply_async(("now@example.com",), queue="marker")

    payloads = notifications("marker")

    assert sorted(payloads[:-1]) == ["a", "b"]


def test_notification_channel_of_a_mixed_case_schema_is_quoted_correctly(
    make_app: Callable[..., App], admin: Connection
) -> None:
    app = make_app(schema=f"Mixed_{secrets.token_hex(3)}_Case")

    @app.task(queue="Q")
    def work() -> None: ...

    admin.execute(sql.SQL("LISTEN {}").format(sql.Identifier(app.queries.channel)))
    try:
        work.delay()
        notify = next(admin.notifies(timeout=10, stop_after=1))
    finally:
        admin.execute("UNLISTEN *")

    assert (notify.channel, notify.payload) == (f"pgtasks.{app.schema}", "Q")


# -- the async pool's lifetime --------------------------------------------------------------------
class SlowProxy:
    """A Unix-socket proxy to the test server that forwards new connections late.

    The first connection waits ``delays[0]`` seconds, the next ones ``delays[1]``: a slow
    network, so that a connection the pool opens in the background is still being opened
    when the caller's work is done.
    """

    def __init__(self, dsn: str, delays: tuple[float, float]) -> None:
        params = conninfo.conninfo_to_dict(dsn)
        host = str(params.get("host") or "localhost")
        self.port = str(params.get("port") or 5432)
        self.target: str | tuple[str, int] = (
            f"{host}/.s.PGSQL.{self.port}" if host.startswith("/") else (host, int(self.port))
        )
        self.delays = delays
        self.folder = tempfile.mkdtemp(prefix="pgt-")
        self.stopped = threading.Event()
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(f"{self.folder}/.s.PGSQL.{self.port}")
        self.listener.listen(16)
        self.listener.settimeout(0.05)
        params.pop("hostaddr", None)
        self.dsn = conninfo.make_conninfo("", **{**params, "host": self.folder, "port": self.port})
        self.threads = [threading.Thread(target=self.accept, daemon=True)]
        self.threads[0].start()

    def accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            delay = self.delays[0 if len(self.threads) == 1 else 1]
            thread = threading.Thread(target=self.serve, args=(client, delay), daemon=True)
            self.threads.append(thread)
            thread.start()

    def serve(self, client: socket.socket, delay: float) -> None:
        if self.stopped.wait(delay):  # the slow network
            client.close()
            return
        family = socket.AF_UNIX if isinstance(self.target, str) else socket.AF_INET
        with client, socket.socket(family) as upstream:
            upstream.connect(self.target)
            for sock in (client, upstream):
                sock.settimeout(0.05)
            while not self.stopped.is_set():
                readable, _, _ = select.select([client, upstream], [], [], 0.05)
                for source in readable:
                    data = source.recv(65536)
                    if not data:
                        return
                    (upstream if source is client else client).sendall(data)

    def close(self) -> None:
        self.stopped.set()
        for thread in self.threads:
            thread.join(timeout=5)
        self.listener.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def test_asyncio_run_of_adelay_returns_without_closing_the_app(
    app: App, dsn: str, admin: Connection
) -> None:
    proxy = SlowProxy(dsn, delays=(0.1, 3.0))  # longer than the wait below
    slow_app = App(proxy.dsn, schema=app.schema, connect_timeout=5)

    @slow_app.task(name="ping")
    def ping() -> None: ...

    done = threading.Event()

    def script() -> None:
        asyncio.run(ping.adelay())  # what a one-off async script does
        done.set()

    threading.Thread(target=script, daemon=True).start()
    try:
        assert done.wait(timeout=1.5), "asyncio.run(task.adelay()) did not return"
    finally:
        pool, loop = slow_app.database._apool, slow_app.database._apool_loop
        if not done.is_set() and pool is not None and loop is not None:
            asyncio.run_coroutine_threadsafe(pool.close(), loop)  # unblock the stuck loop
            done.wait(timeout=10)
        proxy.close()
    assert count_jobs(admin, app) == 1
