"""The limited claim's results are defined by its SQL, not by the plan (migration 0028):
the same limits, fair keys and aging scenario claims the same jobs, holds back the same
limits and leaves the same rows under every planner setting; fair jobs that no limit applies
to are taken by a read and an update alone (migration 0033: no limit lock), in claim order,
and a capped candidate among them sends the claim down the limits' path; right after a bulk
enqueue (the table never analyzed) the claim reads the fair claim index without a sort; and
two stores in one database take each their own limits' locks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from pgtasks import App
from pgtasks._leases import ClaimedJob, ClaimRequest, Finish
from pgtasks._retry import Outcome

# Planner settings a plan may be chosen under (stale statistics lead to the same choices):
# each disables one way of reading, joining, grouping or ordering. jit off keeps the
# test's own statements quick (the claim function sets it for itself).
PLANNER_SETTINGS = [
    "",
    "-c enable_sort=off",
    "-c enable_indexscan=off -c enable_bitmapscan=off -c enable_indexonlyscan=off",
    "-c enable_hashagg=off",
    "-c enable_nestloop=off",
    "-c enable_seqscan=off",
    "-c enable_hashjoin=off -c enable_mergejoin=off",
    "-c enable_material=off -c enable_memoize=off",
]


def _scenario(app: App, admin: psycopg.Connection[Any]) -> list[Any]:
    """Claims and finishes in turn over limited, per-key, rated, fair and aged jobs; the
    observable outcome of each claim (which jobs, what was held back, the rows left)."""
    app.queue("slow", priority_aging=10)
    app.queue("reports", concurrency=3)

    @app.task(name="rated", rate_limit="3/h")
    def rated(n: int) -> None: ...

    @app.task(name="single", concurrency=1)
    def single(n: int) -> None: ...

    @app.task(
        name="per_user", queue="reports", concurrency_key=lambda user, **_: user, concurrency=1
    )
    def per_user(user: str, n: int) -> None: ...

    @app.task(name="fair", fair_key=lambda tenant, **_: tenant, concurrency=4)
    def fair(tenant: str, n: int) -> None: ...

    @app.task(name="fair_slow", queue="slow", fair_key=lambda tenant, **_: tenant)
    def fair_slow(tenant: str, n: int) -> None: ...

    with app.connection() as conn:
        app.queries.upsert_limits(conn, app.limit_definitions())
    rated.delay_many([{"n": n} for n in range(4)])
    single.delay_many([{"n": n} for n in range(3)])
    per_user.delay_many([{"user": user, "n": n} for user in ("ann", "bob") for n in range(3)])
    fair.delay_many([{"tenant": "big", "n": n} for n in range(12)])
    fair.delay_many([{"tenant": f"t{n}", "n": n} for n in range(3)])
    for priority in (0, 2):
        fair.apply_async(kwargs={"tenant": "top", "n": priority}, priority=priority + 3)
    slow = fair_slow.delay_many([{"tenant": "s", "n": n} for n in range(2)])
    admin.execute(
        f"UPDATE {app.schema}.jobs SET run_at = now() - interval '45 seconds' WHERE id = ANY(%s)",
        [[handle.id for handle in slow]],
    )
    with app.connection() as conn:
        worker = app.queries.register_worker(conn, hostname="h", pid=1, queues=None, concurrency=8)

    outcome: list[Any] = []
    taken: list[ClaimedJob] = []
    for round_, limit in enumerate((4, 3, 5, 2, 6, 8)):
        with app.connection() as conn:
            # Aging for the slow queue throughout, for every queue from round 3 on.
            aging: dict[str, Any] = {"aging": 20.0} if round_ >= 3 else {}
            claim = ClaimRequest(
                worker, limit, limited=True, queue_aging=(("slow", 10.0),), **aging
            )
            jobs, report = app.queries.claim_limited(conn, claim)
        outcome.append(
            (
                [(job.task_name, job.args, job.kwargs) for job in jobs],
                sorted(report.blocked),
                report.error,
            )
        )
        taken.extend(jobs)
        # Some rounds end every job taken so far (their concurrency slots come free).
        if round_ in (1, 3):
            with app.connection() as conn:
                app.queries.finish_jobs(
                    conn, [Finish.of(job, Outcome.done("null")) for job in taken]
                )
            taken.clear()
    left = admin.execute(
        f"SELECT task_name, kwargs, status FROM {app.schema}.jobs ORDER BY task_name, id"
    ).fetchall()
    tokens = admin.execute(
        f"SELECT name, floor(tokens) FROM {app.schema}.limits WHERE rate_count IS NOT NULL"
    ).fetchall()
    outcome.append((left, tokens))
    return outcome


def _apps_under_every_planner_setting(make_app: Any, dsn: str) -> Iterator[tuple[str, App]]:
    """An App of its own for each of PLANNER_SETTINGS (as its connections' startup options,
    JIT off); the test is skipped on a transaction pooler, which takes no startup options."""
    for settings in PLANNER_SETTINGS:
        app = make_app(dsn=make_conninfo(dsn, options=f"-c jit=off {settings}".strip()))
        if app.database.pooled:
            pytest.skip("the test server is a transaction pooler: it takes no startup options")
        yield settings, app


def test_the_limited_claim_gives_the_same_results_under_every_planner_setting(
    make_app: Any, admin: psycopg.Connection[Any], dsn: str
) -> None:
    outcomes: dict[str, list[Any]] = {}
    for settings, app in _apps_under_every_planner_setting(make_app, dsn):
        with app.connection() as conn:
            shown = conn.execute("SELECT current_setting('enable_nestloop')").fetchone()
        assert shown == ("off" if "nestloop" in settings else "on",)
        outcomes[settings] = _scenario(app, admin)
    reference = outcomes[""]
    # The scenario exercises what it means to: some claims held back, some took jobs.
    assert any(blocked for _, blocked, _ in reference[:-1])
    assert all(error is None for _, _, error in reference[:-1])
    assert sum(len(jobs) for jobs, _, _ in reference[:-1]) >= 15
    for settings, outcome in outcomes.items():
        assert outcome == reference, settings


def _fast_scenario(app: App, admin: psycopg.Connection[Any]) -> list[Any]:
    """Claims without aging of fair jobs with no limit (the read-and-update path of
    migration 0033), then with capped fair jobs among the candidates: per claim, the jobs
    in the order returned, the limits held back and the advisory locks the claim held."""

    @app.task(name="free", fair_key=lambda tenant, **_: tenant)
    def free(tenant: str, n: int) -> None: ...

    @app.task(
        name="capped",
        fair_key=lambda tenant, **_: tenant,
        concurrency_key=lambda tenant, **_: tenant,
        concurrency=1,
    )
    def capped(tenant: str, n: int) -> None: ...

    free.delay_many([{"tenant": "a", "n": n} for n in range(6)])
    free.delay_many([{"tenant": "b", "n": n} for n in range(2)])
    free.apply_async(kwargs={"tenant": "c", "n": 0})
    with app.connection() as conn:
        worker = app.queries.register_worker(conn, hostname="h", pid=1, queues=None, concurrency=8)
    outcome: list[Any] = []

    def claim(limit: int) -> None:
        with app.connection() as conn, conn.transaction():
            jobs, report = app.queries.claim_limited(
                conn, ClaimRequest(worker, limit, limited=True)
            )
            locks = conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                " AND pid = pg_backend_pid()"
            ).fetchone()
        outcome.append(
            (
                [(job.task_name, job.kwargs["tenant"], job.kwargs["n"]) for job in jobs],
                sorted(report.blocked),
                report.wait,
                report.error,
                locks,
            )
        )

    claim(4)
    claim(2)
    with app.connection() as conn:
        app.queries.upsert_limits(conn, app.limit_definitions())
    capped.apply_async(kwargs={"tenant": "x", "n": 0}, priority=5)
    capped.apply_async(kwargs={"tenant": "x", "n": 1}, priority=5)
    claim(4)
    claim(8)
    claim(3)
    return outcome


def test_fair_jobs_without_limits_are_claimed_in_order_without_limit_locks(
    make_app: Any, admin: psycopg.Connection[Any], dsn: str
) -> None:
    outcomes = {
        settings: _fast_scenario(app, admin)
        for settings, app in _apps_under_every_planner_setting(make_app, dsn)
    }
    reference = outcomes[""]
    # Rank 0 of every key, then rank 1 (ties by enqueue): no limit lock taken.
    assert reference[0] == (
        [("free", "a", 0), ("free", "b", 0), ("free", "c", 0), ("free", "a", 1)],
        [],
        None,
        None,
        (0,),
    )
    assert reference[1] == ([("free", "b", 1), ("free", "a", 2)], [], None, None, (0,))
    # A capped candidate first: its key's cap (1) holds its second job back, the free
    # jobs behind it are taken as before, under the limit's lock.
    jobs, _, _, error, locks = reference[2]
    assert jobs == [("capped", "x", 0), ("free", "a", 3), ("free", "a", 4), ("free", "a", 5)]
    assert error is None and locks != (0,)
    # Then the capped key is still full (the claim says so); nothing else is due.
    assert reference[3][0] == [] and reference[3][1] == ["key:capped"]
    assert reference[4][0] == []
    for settings, outcome in outcomes.items():
        assert outcome == reference, settings


def test_two_stores_in_one_database_claim_their_limited_jobs_side_by_side(
    make_app: Any,
) -> None:
    """A limit's lock is its schema's: while one store's claim holds its limit (inside
    its transaction), the other store's claim of a limit of the same name takes its job
    (with one lock for both it waited, then skipped the limit as held)."""
    stores = [make_app(), make_app()]
    workers: list[int] = []
    for app in stores:

        @app.task(name="limited", concurrency=2)
        def limited(n: int) -> None: ...

        with app.connection() as conn:
            app.queries.upsert_limits(conn, app.limit_definitions())
            workers.append(
                app.queries.register_worker(conn, hostname="h", pid=1, queues=None, concurrency=8)
            )
        limited.delay_many([{"n": n} for n in range(3)])
    first, second = stores
    with first.connection() as held, held.transaction():
        jobs, _ = first.queries.claim_limited(held, ClaimRequest(workers[0], 1, limited=True))
        assert [job.kwargs for job in jobs] == [{"n": 0}]
        with second.connection() as conn:
            other, other_report = second.queries.claim_limited(
                conn, ClaimRequest(workers[1], 2, limited=True)
            )
        assert [job.kwargs for job in other] == [{"n": 0}, {"n": 1}]
        assert other_report.wait is None and other_report.error is None


def test_a_claim_before_any_analyze_reads_the_fair_claim_index_in_order(
    make_app: Any, admin: psycopg.Connection[Any]
) -> None:
    """Right after a bulk enqueue, before autovacuum analyzed jobs, the planner takes the
    fair index's partial predicate for a few rows and would sort every pending fair job;
    the claim reads the index in its order instead (auto_explain of its statements: the
    candidates' read of fair jobs without limits, migration 0033)."""
    app = make_app()
    admin.execute(f"ALTER TABLE {app.schema}.jobs SET (autovacuum_enabled = false)")

    @app.task(fair_key=lambda key, n: key)
    def work(key: str, n: int) -> None: ...

    work.delay_many([{"key": f"k{n % 50}", "n": n} for n in range(3000)])
    never = admin.execute(
        "SELECT coalesce(last_analyze, last_autoanalyze) IS NULL FROM pg_stat_user_tables"
        " WHERE schemaname = %s AND relname = 'jobs'",
        [app.schema],
    ).fetchone()
    assert never == (True,)
    try:
        admin.execute("LOAD 'auto_explain'")
    except psycopg.Error as error:
        pytest.skip(f"auto_explain cannot be loaded on this server: {error}")
    plans: list[str] = []
    admin.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
    for setting, value in (
        ("auto_explain.log_min_duration", "0"),
        ("auto_explain.log_nested_statements", "on"),
        ("auto_explain.log_level", "notice"),
    ):
        admin.execute("SELECT set_config(%s, %s, false)", (setting, value))
    worker = admin.execute(
        f"INSERT INTO {app.schema}.workers (hostname, pid, queues, concurrency)"
        " VALUES ('h', 1, NULL, 8) RETURNING id"
    ).fetchone()
    assert worker is not None
    claimed, _ = app.queries.claim_limited(admin, ClaimRequest(worker[0], 10, limited=True))
    admin.execute("SELECT set_config('auto_explain.log_min_duration', '-1', false)")
    assert [job.kwargs["n"] for job in claimed] == list(range(10))
    candidates = [plan for plan in plans if "SELECT array_agg(c.id ORDER BY" in plan]
    assert candidates, plans
    for plan in candidates:
        assert "Index Scan using jobs_fair_claim_idx" in plan, plan
        assert "Bitmap Heap Scan" not in plan and "Seq Scan" not in plan, plan


def test_only_running_jobs_that_name_a_limit_enter_the_limited_running_index(
    make_app: Any, admin: psycopg.Connection[Any]
) -> None:
    """A fair job without a cap or a rate (an empty limit_groups) is left out of
    jobs_limited_running_idx when claimed (migration 0036); a capped job enters it, and a
    claim of its key counts it through the index (auto_explain of the claim's statements)
    and holds the key's next job back."""
    app = make_app()

    @app.task(name="free", fair_key=lambda tenant, n: tenant)
    def free(tenant: str, n: int) -> None: ...

    @app.task(
        name="capped",
        fair_key=lambda tenant, n: tenant,
        concurrency_key=lambda tenant, n: tenant,
        concurrency=1,
    )
    def capped(tenant: str, n: int) -> None: ...

    with app.connection() as conn:
        app.queries.upsert_limits(conn, app.limit_definitions())
        worker = app.queries.register_worker(conn, hostname="h", pid=1, queues=None, concurrency=8)
    free.delay_many([{"tenant": f"t{n % 20}", "n": n} for n in range(400)])
    with app.connection() as conn:
        taken, _ = app.queries.claim_limited(conn, ClaimRequest(worker, 400, limited=True))
    assert len(taken) == 400
    capped.delay_many([{"tenant": "x", "n": n} for n in range(2)])
    with app.connection() as conn:
        first, _ = app.queries.claim_limited(conn, ClaimRequest(worker, 1, limited=True))
    assert [job.kwargs for job in first] == [{"tenant": "x", "n": 0}]
    admin.execute(f"ANALYZE {app.schema}.jobs")
    definition = admin.execute(
        "SELECT pg_get_indexdef(%s::regclass)", [f"{app.schema}.jobs_limited_running_idx"]
    ).fetchone()
    assert definition is not None and "limit_groups <> ARRAY[]::text[]" in definition[0]
    # What the index holds: its predicate's rows, read by an index-only scan of it alone.
    with admin.transaction():
        for setting in ("enable_seqscan", "enable_bitmapscan"):
            admin.execute("SELECT set_config(%s, 'off', true)", [setting])
        query = (
            f"SELECT id FROM {app.schema}.jobs"
            " WHERE status = 'running' AND limit_groups <> ARRAY[]::text[]"
        )
        plan = "\n".join(row[0] for row in admin.execute(f"EXPLAIN {query}").fetchall())
        assert "jobs_limited_running_idx" in plan, plan
        assert admin.execute(query).fetchall() == [(first[0].id,)]
    try:
        admin.execute("LOAD 'auto_explain'")
    except psycopg.Error as error:
        pytest.skip(f"auto_explain cannot be loaded on this server: {error}")
    plans: list[str] = []
    admin.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
    for setting, value in (
        ("auto_explain.log_min_duration", "0"),
        ("auto_explain.log_nested_statements", "on"),
        ("auto_explain.log_level", "notice"),
    ):
        admin.execute("SELECT set_config(%s, %s, false)", (setting, value))
    second, report = app.queries.claim_limited(admin, ClaimRequest(worker, 1, limited=True))
    admin.execute("SELECT set_config('auto_explain.log_min_duration', '-1', false)")
    assert second == [] and report.blocked == ("key:capped",)
    counts = [plan for plan in plans if "running AS (" in plan]
    assert counts, plans
    assert all("jobs_limited_running_idx" in plan for plan in counts), counts
