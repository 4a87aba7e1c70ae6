"""Concurrency and rate limits (migration 0009): declaration, the rows enqueue writes, and
the limited claim against the database, with several claimers (worker ids) in turn."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from pgtasks import App, JobStatus, LimitKeyError
from pgtasks._leases import ClaimedJob, ClaimRequest, Finish, LimitedClaimReport
from pgtasks._retry import Outcome
from pgtasks._store.queries import notification_channel
from tests.support.inprocess import finished, running_worker


def _register(app: App, count: int) -> list[int]:
    with app.connection() as conn:
        return [
            app.queries.register_worker(conn, hostname="h", pid=index, queues=None, concurrency=8)
            for index in range(count)
        ]


def _claim(app: App, worker_id: int, limit: int) -> list[ClaimedJob]:
    """A worker's claim when some limit is stored: limited jobs first, then plain ones."""
    with app.connection() as conn:
        claim = ClaimRequest(worker_id, limit, limited=True)
        return list(app.queries.finish_and_claim_jobs(conn, (), claim).claimed)


def _finish(app: App, jobs: list[ClaimedJob]) -> None:
    with app.connection() as conn:
        app.queries.finish_jobs(conn, [Finish.of(job, Outcome.done("null")) for job in jobs])


def _store_limits(app: App) -> int:
    with app.connection() as conn:
        return app.queries.upsert_limits(conn, app.limit_definitions())


def test_enqueue_writes_the_limit_names_and_the_key(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    app.queue("reports", concurrency=3)

    @app.task(queue="reports", concurrency_key=lambda user_id, **_: user_id, concurrency=1)
    def report(user_id: int, kind: str = "x") -> None: ...

    @app.task
    def plain() -> None: ...

    job = report.delay(42)
    other = plain.delay()
    handles = report.delay_many([{"user_id": 7}, {"user_id": "u8"}])
    rows = admin.execute(
        f"SELECT id, limit_groups, limit_key FROM {app.schema}.all_jobs ORDER BY id"
    ).fetchall()
    key = f"key:{report.name}\x1f"
    assert rows == [
        (job.id, [key + "42", "queue:reports"], "42"),
        (other.id, None, None),
        (handles[0].id, [key + "7", "queue:reports"], "7"),
        (handles[1].id, [key + "u8", "queue:reports"], "u8"),
    ]


def test_a_task_concurrency_is_never_exceeded_by_several_claimers(app: App) -> None:
    @app.task(concurrency=2)
    def limited(n: int) -> None: ...

    @app.task
    def plain(n: int) -> None: ...

    assert _store_limits(app) == 1
    limited.delay_many([{"n": n} for n in range(10)])
    plain.delay_many([{"n": n} for n in range(5)])
    first, second = _register(app, 2)
    rows = _claim(app, first, 1)
    assert [row.task_name for row in rows] == [limited.name]
    rows += _claim(app, second, 8)
    # one more limited job, then the plain ones fill the rest
    assert [row.task_name for row in rows].count(limited.name) == 2
    assert [row.task_name for row in rows].count(plain.name) == 5
    assert _claim(app, first, 8) == []
    _finish(app, [rows[0]])
    again = _claim(app, first, 8)
    assert [row.task_name for row in again] == [limited.name]


def test_a_per_key_limit_lets_other_keys_pass_a_busy_key(app: App) -> None:
    @app.task(concurrency_key=lambda user, **_: user, concurrency=1)
    def sync(user: str, n: int) -> None: ...

    assert _store_limits(app) == 1
    # Many jobs of one key first, then one job each of other keys.
    sync.delay_many([{"user": "busy", "n": n} for n in range(100)])
    sync.delay_many([{"user": f"u{n}", "n": n} for n in range(5)])
    (worker,) = _register(app, 1)
    rows = _claim(app, worker, 10)
    keys = sorted(row.kwargs["user"] for row in rows)
    assert keys == ["busy", "u0", "u1", "u2", "u3", "u4"]
    assert _claim(app, worker, 10) == []


def test_queue_and_task_limits_both_apply(app: App) -> None:
    app.queue("reports", concurrency=3)

    @app.task(queue="reports", concurrency=2)
    def a(n: int) -> None: ...

    @app.task(queue="reports")
    def b(n: int) -> None: ...

    assert _store_limits(app) == 2
    a.delay_many([{"n": n} for n in range(5)])
    b.delay_many([{"n": n} for n in range(5)])
    (worker,) = _register(app, 1)
    rows = _claim(app, worker, 10)
    names = [row.task_name for row in rows]
    assert len(rows) == 3 and names.count(a.name) == 2


def test_a_rate_limit_gives_at_most_the_tokens(app: App) -> None:
    @app.task(rate_limit="2/h")
    def slow(n: int) -> None: ...

    _store_limits(app)
    slow.delay_many([{"n": n} for n in range(5)])
    (worker,) = _register(app, 1)
    # The bucket starts full with one token (the burst): one job now, the next in 30 min.
    assert len(_claim(app, worker, 5)) == 1
    assert _claim(app, worker, 5) == []


def test_a_rescued_job_frees_its_slot(app: App, admin: psycopg.Connection[Any]) -> None:
    @app.task(concurrency=1)
    def one(n: int) -> None: ...

    _store_limits(app)
    one.delay_many([{"n": n} for n in range(2)])
    first, second = _register(app, 2)
    assert len(_claim(app, first, 5)) == 1
    assert _claim(app, second, 5) == []
    admin.execute(f"DELETE FROM {app.schema}.workers WHERE id = %s", [first])
    with app.connection() as conn:
        rescued = app.queries.rescue_jobs(conn, lease_timeout=30)
    assert len(rescued) == 1
    assert len(_claim(app, second, 5)) == 1
    assert _claim(app, second, 5) == []


@pytest.mark.parametrize(
    ("groups", "key"),
    [
        ("{}", None),
        ("{NULL}", None),
        ("{key:nothing}", None),
        ("{unknown:x}", "k"),
        ('{"key:\\u001fweird"}', "x" * 5000),
    ],
)
def test_a_hostile_limit_row_is_claimed_or_left_never_an_error(
    app: App, admin: psycopg.Connection[Any], groups: str, key: str | None
) -> None:
    @app.task
    def plain() -> None: ...

    job = plain.delay()
    admin.execute(
        f"UPDATE {app.schema}.jobs SET limit_groups = %s::text[], limit_key = %s WHERE id = %s",
        [groups, key, job.id],
    )
    (worker,) = _register(app, 1)
    rows = _claim(app, worker, 5)
    assert [row.id for row in rows] == [job.id]
    assert job.status() is JobStatus.RUNNING


def test_a_failing_concurrency_key_writes_nothing(app: App, admin: psycopg.Connection[Any]) -> None:
    @app.task(concurrency_key=lambda user: {"not": "a key"}, concurrency=1)
    def work(user: str) -> None: ...

    with pytest.raises(LimitKeyError, match="must return a str or an int"):
        work.delay("ann")
    with pytest.raises(LimitKeyError):
        work.delay_many([{"user": "ann"}, {"user": "bob"}])
    assert admin.execute(f"SELECT count(*) FROM {app.schema}.all_jobs").fetchone() == (0,)


def test_a_worker_runs_limited_jobs_and_hostile_limit_rows_alike(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    ran: list[str] = []

    @app.task(concurrency_key=lambda label: label[:1], concurrency=1, rate_limit="100/s")
    def work(label: str) -> None:
        ran.append(label)

    handles = work.delay_many([{"label": f"{c}{n}"} for c in "ab" for n in range(3)])
    hostile = [work.delay("h1"), work.delay("h2"), work.delay("h3")]
    oversized = work.delay("h4")
    oversize = (
        f"UPDATE {app.schema}.jobs SET limit_groups = array_fill('task:x'::text, ARRAY[100000])"
        " WHERE id = %s"
    )
    # More than 8 limit instances are refused at the write (migration flow_control)...
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_limit_groups_check"):
        admin.execute(oversize, [oversized.id])
    # ...and a row written so before it is left pending.
    admin.execute(f"ALTER TABLE {app.schema}.jobs DROP CONSTRAINT jobs_limit_groups_check")
    admin.execute(oversize, [oversized.id])
    admin.execute(
        f"ALTER TABLE {app.schema}.jobs ADD CONSTRAINT jobs_limit_groups_check"
        " CHECK (limit_groups IS NULL OR cardinality(limit_groups) <= 8) NOT VALID"
    )
    for handle, (groups, key) in zip(
        hostile,
        [("{NULL,NULL}", None), ("{key:}", "\\x1f" * 3), ("{queue:nowhere}", "")],
        strict=True,
    ):
        admin.execute(
            f"UPDATE {app.schema}.jobs SET limit_groups = %s::text[], limit_key = %s WHERE id = %s",
            [groups, key, handle.id],
        )
    with running_worker(app, concurrency=4):
        for handle in handles + hostile:
            assert finished(handle).status is JobStatus.DONE
    assert sorted(ran) == sorted([f"{c}{n}" for c in "ab" for n in range(3)] + ["h1", "h2", "h3"])
    # A row written before the check with 100,000 instances is left pending, and slows nothing.
    assert oversized.status() is JobStatus.PENDING


def test_limited_jobs_keep_their_meta(app: App) -> None:
    @app.task(concurrency_key=lambda user, **_: user, concurrency=1)
    def work(user: str) -> None: ...

    one = work.apply_async(["ann"], meta={"source": "api"})
    many = work.delay_many([{"user": "bob"}, {"user": "cid"}], meta={"batch": 7})
    plain = work.delay("dan")
    (worker,) = _register(app, 1)
    jobs = {job.id: job for job in _claim(app, worker, 10)}
    assert jobs[one.id].meta == {"source": "api"}
    assert [jobs[handle.id].meta for handle in many] == [{"batch": 7}, {"batch": 7}]
    assert jobs[plain.id].meta == {}
    assert one.meta == {"source": "api"}


def test_a_claimer_stuck_inside_its_transaction_holds_up_the_others_briefly(
    app: App, dsn: str
) -> None:
    @app.task(concurrency=5)
    def limited(n: int) -> None: ...

    @app.task
    def plain(n: int) -> None: ...

    _store_limits(app)
    limited.delay_many([{"n": n} for n in range(3)])
    plain.delay(0)
    (worker,) = _register(app, 1)
    with psycopg.connect(dsn) as stuck:  # a transaction holding the limit's lock, idle
        stuck.execute(
            "SELECT pg_advisory_xact_lock(1885828204, hashtext(%s || chr(31) || %s))",
            [notification_channel(app.schema), f"task:{limited.name}"],
        )
        rows = _claim(app, worker, 5)
        assert [row.task_name for row in rows] == [plain.name]
        stuck.rollback()
    assert len(_claim(app, worker, 5)) == 3


def _claim_with_report(
    app: App, worker_id: int, limit: int
) -> tuple[list[ClaimedJob], LimitedClaimReport]:
    with app.connection() as conn:
        return app.queries.claim_limited(conn, ClaimRequest(worker_id, limit, limited=True))


def test_a_short_limited_claim_says_which_limits_held_jobs_back_and_when_a_token_is_due(
    app: App,
) -> None:
    # A rate whose next token is half a minute away: the second claim finds none however
    # long the first took (with 2/s, a claim slower than 0.25 s found the next token due).
    @app.task(rate_limit="2/m")
    def rated(n: int) -> None: ...

    @app.task(concurrency=1)
    def single(n: int) -> None: ...

    _store_limits(app)
    rated.delay_many([{"n": n} for n in range(5)])
    single.delay_many([{"n": n} for n in range(3)])
    (worker,) = _register(app, 1)
    rows, report = _claim_with_report(app, worker, 10)
    # 2/m holds a little over one token: one job now; the single slot: one job.
    assert sorted(row.task_name for row in rows) == [rated.name, single.name]
    assert report.error is None
    assert set(report.blocked) == {f"task:{rated.name}", f"task:{single.name}"}
    # Less than a token is left: the next whole one is due within 30 seconds.
    assert report.wait is not None and 0 < report.wait <= 30
    rows, report = _claim_with_report(app, worker, 10)
    assert rows == []
    assert report.wait is not None and 0 < report.wait <= 30


def test_a_full_claim_reports_nothing_held_back(app: App) -> None:
    @app.task(concurrency=5)
    def five(n: int) -> None: ...

    _store_limits(app)
    five.delay_many([{"n": n} for n in range(3)])
    (worker,) = _register(app, 1)
    rows, report = _claim_with_report(app, worker, 3)
    assert len(rows) == 3
    assert report == LimitedClaimReport(wait=None, blocked=(), error=None)


def test_limits_values_written_by_hand_are_refused_by_the_checks(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task(rate_limit="5/s")
    def rated() -> None: ...

    _store_limits(app)
    table = f"{app.schema}.limits"
    for assignment in (
        "tokens = '-Infinity'",
        "tokens = 'NaN'",
        "refilled_at = 'infinity'",
        "burst = 'Infinity'",
        "rate_period = 'NaN'",
        "rate_period = 1e-300",
        "updated_at = '-infinity'",
    ):
        with pytest.raises(psycopg.errors.CheckViolation):
            admin.execute(f"UPDATE {table} SET {assignment}")


@pytest.mark.parametrize(
    "assignment",
    [
        "tokens = '-Infinity', refilled_at = 'infinity'",
        "tokens = 'NaN', burst = 'NaN', rate_period = 'NaN'",
        "tokens = 'Infinity', burst = 'Infinity', refilled_at = '-infinity'",
        "rate_period = 1e-300, burst = 1e300",
        "refilled_at = now() + interval '1000 years'",
    ],
)
def test_a_limits_row_past_its_checks_is_clamped_never_an_error(
    app: App, admin: psycopg.Connection[Any], assignment: str
) -> None:
    """Values the claim arithmetic cannot take (a DBA dropped the checks): the claim clamps
    them, so the bucket holds at most its burst and the jobs run."""

    @app.task(rate_limit="5/s", concurrency=3)
    def rated(n: int) -> None: ...

    _store_limits(app)
    table = f"{app.schema}.limits"
    for constraint in admin.execute(
        "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'c'",
        [table],
    ).fetchall():
        admin.execute(f"ALTER TABLE {table} DROP CONSTRAINT {constraint[0]}")
    admin.execute(f"UPDATE {table} SET {assignment}")
    rated.delay_many([{"n": n} for n in range(5)])
    (worker,) = _register(app, 1)
    rows, report = _claim_with_report(app, worker, 5)
    assert report.error is None
    assert 0 <= len(rows) <= 3
    states = app.admin.limits()
    assert [state.name for state in states] == [f"task:{rated.name}"]


def test_a_limited_claim_that_fails_reports_its_error_and_the_plain_claim_goes_on(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task(concurrency=2)
    def limited(n: int) -> None: ...

    @app.task
    def plain(n: int) -> None: ...

    _store_limits(app)
    limited.delay_many([{"n": n} for n in range(3)])
    plain.delay_many([{"n": n} for n in range(3)])
    (worker,) = _register(app, 1)
    admin.execute(f"ALTER TABLE {app.schema}.limits RENAME COLUMN tokens TO tokens_by_hand")
    rows, report = _claim_with_report(app, worker, 5)
    assert rows == []
    assert report.error is not None and "tokens" in report.error
    with app.connection() as conn:
        trip = app.queries.finish_and_claim_jobs(conn, (), ClaimRequest(worker, 5, limited=True))
    # The claim_limited statement reports its own error: the plain claim goes on.
    assert sorted(job.task_name for job in trip.claimed) == [plain.name] * 3
    assert trip.report.error is not None
    admin.execute(f"ALTER TABLE {app.schema}.limits RENAME COLUMN tokens_by_hand TO tokens")
    rows, report = _claim_with_report(app, worker, 5)
    assert [row.task_name for row in rows] == [limited.name] * 2
    assert report.error is None


def test_the_limited_claim_refuses_to_count_outside_read_committed(app: App) -> None:
    @app.task(concurrency=1)
    def limited(n: int) -> None: ...

    _store_limits(app)
    limited.delay_many([{"n": n} for n in range(2)])
    (worker,) = _register(app, 1)
    with app.connection() as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        rows, report = app.queries.claim_limited(conn, ClaimRequest(worker, 5, limited=True))
    assert rows == []
    assert report.error is not None
    assert "needs READ COMMITTED" in report.error and "REPEATABLE READ" in report.error


def test_a_plain_claim_that_fails_after_a_limited_one_keeps_what_the_limited_one_took(
    app: App,
) -> None:
    @app.task(concurrency=2)
    def limited(n: int) -> None: ...

    @app.task
    def plain(n: int) -> None: ...

    _store_limits(app)
    limited.delay_many([{"n": n} for n in range(3)])
    plain.delay_many([{"n": n} for n in range(3)])
    (worker,) = _register(app, 1)
    # The plain claim fails (alone on the connection, it runs announced).
    failing = {name: b"SELECT 1 / 0" for name in ("claim_jobs", "claim_jobs_announced")}
    store = app.queries.overriding(failing)
    with app.connection() as conn:
        trip = store.finish_and_claim_jobs(conn, (), ClaimRequest(worker, 5, limited=True))
    # The limited claim's jobs stand (committed in its own round trip) and are returned.
    assert [job.task_name for job in trip.claimed] == [limited.name] * 2
    assert trip.report.error is None
    assert trip.report.plain_error is not None and "DivisionByZero" in trip.report.plain_error
    # The limit is full: the next claim takes the plain jobs.
    assert [row.task_name for row in _claim(app, worker, 5)] == [plain.name] * 3


def test_a_pending_row_whose_next_attempt_would_not_fit_is_left_and_stops_no_claim(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task
    def plain(n: int) -> None: ...

    @app.task(concurrency=5)
    def limited(n: int) -> None: ...

    _store_limits(app)
    stuck = [plain.delay(0), limited.delay(0)]
    admin.execute(
        f"UPDATE {app.schema}.jobs SET attempts = 2147483647, max_attempts = 2147483647"
        " WHERE id = ANY(%s)",
        [[job.id for job in stuck]],
    )
    others = [*plain.delay_many([{"n": n} for n in range(2)]), limited.delay(1)]
    (worker,) = _register(app, 1)
    rows = _claim(app, worker, 10)
    assert sorted(row.id for row in rows) == sorted(job.id for job in others)
    assert [job.status() for job in stuck] == [JobStatus.PENDING] * 2


def test_read_limits_gives_each_limits_capacity_rate_tokens_and_running_per_key(
    app: App,
) -> None:
    """The admin read a limits page uses: per limit its concurrency, rate, tokens now and
    the jobs running under it, per key for a per-key limit, on the caller's connection."""
    app.queue("reports", concurrency=3)

    # 2/m: no whole token comes back between the claim and the read, however slow either.
    @app.task(queue="reports", rate_limit="2/m")
    def report(n: int) -> None: ...

    @app.task(concurrency_key=lambda user, **_: user, concurrency=1)
    def sync(user: str, n: int) -> None: ...

    _store_limits(app)
    report.delay_many([{"n": n} for n in range(4)])
    sync.delay_many([{"user": user, "n": n} for user in ("ann", "bob") for n in range(3)])
    (worker,) = _register(app, 1)
    claimed = _claim(app, worker, 10)

    with app.connection() as conn:
        states = {state.name: state for state in app.admin.read_limits(conn)}

    queue, task = states["queue:reports"], states[f"task:{report.name}"]
    key = next(state for state in states.values() if state.kind == "key")
    assert (queue.kind, queue.target, queue.concurrency, queue.rate) == (
        "queue", "reports", 3, "-"
    )  # fmt: skip
    assert queue.tokens is None and queue.running == sum(
        1 for row in claimed if row.queue == "reports"
    )
    assert task.rate_per_second == 2 / 60 and task.concurrency is None
    assert task.tokens is not None and 0 <= task.tokens <= (task.burst or 0)
    assert task.running == sum(1 for row in claimed if row.task_name == report.name)
    assert task.pending == 4 - task.running and task.held == task.pending
    assert (key.concurrency, key.target, key.keys) == (1, sync.name, 2)
    per_key = {usage.key: (usage.running, usage.pending) for usage in key.top_keys}
    assert per_key == {"ann": (1, 2), "bob": (1, 2)}
    assert all(state.stored for state in states.values())


def test_read_limits_holds_back_only_what_a_limit_holds_and_skips_overloaded_rows(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    """A rate alone holds back the due jobs past its whole tokens (not every due job); a
    per-key limit no worker stored holds back none of its keys' jobs; a pending job under
    more than 8 instances (no claim takes it) is counted in no limit; the limits' values
    are within the table's checks."""

    @app.task(rate_limit="1/h")
    def hourly(n: int) -> None: ...

    @app.task(concurrency_key=lambda user, **_: user, concurrency=1)
    def sync(user: str) -> None: ...

    _store_limits(app)
    hourly.delay_many([{"n": n} for n in range(3)])
    admin.execute(
        f"UPDATE {app.schema}.limits SET tokens = 2, refilled_at = now() WHERE name = %s",
        [f"task:{hourly.name}"],
    )
    admin.execute(f"DELETE FROM {app.schema}.limits WHERE name LIKE 'key:%%'")
    sync.delay_many([{"user": "ann"}, {"user": "ann"}])
    admin.execute(f"ALTER TABLE {app.schema}.jobs DROP CONSTRAINT jobs_limit_groups_check")
    flooded = hourly.delay(99)
    admin.execute(
        f"UPDATE {app.schema}.jobs SET limit_groups = array_fill(%s::text, ARRAY[100000])"
        " WHERE id = %s",
        [f"task:{hourly.name}", flooded.id],
    )
    with app.connection() as conn:
        states = {state.name: state for state in app.admin.read_limits(conn)}
        bad_values = app.queries.get_limit_bad_values(conn)
    rated = states[f"task:{hourly.name}"]
    # Burst 1.0003 ("1/h"): tokens clamped to it, one whole token: 1 of the 3 may start.
    assert (rated.pending, rated.due, rated.held) == (3, 3, 2)
    keyed = next(state for state in states.values() if state.kind == "key")
    assert not keyed.stored and (keyed.pending, keyed.held) == (2, 0)
    assert [(key.key, key.pending, key.held) for key in keyed.top_keys] == [("ann", 2, 0)]
    assert bad_values == []
