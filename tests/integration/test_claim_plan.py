"""The claim's query plans: ordered walks of jobs_claim_idx, even with stale statistics,
and a claim from a worker's position that skips the entries of jobs already claimed."""

from __future__ import annotations

import datetime as dt
import re
import time
from typing import Any

import psycopg

from pgtasks import App
from pgtasks._leases import ClaimedJob, ClaimPosition, ClaimRequest, Finish
from pgtasks._retry import Outcome
from pgtasks._store.claims import claim_statement, finish_params
from pgtasks._worker.connection import WORKER_CONNECTION_OPTIONS
from tests.support.waiting import wait_until

WORKER = 10**9


def test_claim_walks_the_pending_index_in_order_even_with_stale_statistics(
    app: App, dsn: str, admin: psycopg.Connection[Any]
) -> None:
    @app.task
    def noop() -> None:
        return None

    # Statistics taken on an empty table, then 5,000 pending jobs: the estimate is wrong.
    admin.execute(f'ANALYZE "{app.schema}".jobs')
    noop.delay_many([{}] * 5000)
    position = ClaimPosition(0, dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1), 0)

    # Every queue, named queues, and every queue but the paused ones (migration 0007); a
    # worker claims only the tasks it knows (migration flow_control): with and without that list.
    tasks = (*[f"task.{n}" for n in range(200)], noop.name)
    for queues, excluded, task_names in (
        (None, None, None),
        (None, ("paused",), None),
        (("default",), None, None),
        (None, None, tasks),
        (("default",), ("paused",), tasks),
    ):
        plan = explain_claim(app, dsn, queues, excluded=excluded, task_names=task_names)
        assert "Index Scan using jobs_claim_idx" in plan, plan
        # Sorted: only the priority levels (found lowest first), never jobs.
        assert re.findall(r"Sort Key: (.*)", plan) == ["levels_1.priority DESC"], plan
        assert "Bitmap" not in plan, plan

        plan = explain_claim(
            app, dsn, queues, after=position, excluded=excluded, task_names=task_names
        )
        # Three ordered walks (higher, same, lower priority); the same-priority one starts
        # at the position inside the index. The only sort is of the priorities above the
        # position's (found lowest first), never of jobs.
        assert plan.count("Index Scan using jobs_claim_idx") == 3, plan
        assert "ROW(run_at, id) > ROW(" in plan, plan
        assert re.findall(r"Sort Key: (.*)", plan) == [
            "higher_1.priority DESC",
            "lower_1.priority DESC",
        ], plan
        assert "Bitmap" not in plan, plan


def test_a_claim_from_the_position_does_not_read_the_entries_of_claimed_jobs(
    app: App, dsn: str, admin: psycopg.Connection[Any]
) -> None:
    """With the xmin horizon pinned, claimed jobs' index entries cannot be removed: a
    claim from the start reads all of them, a claim from the position does not."""

    @app.task
    def noop() -> None:
        return None

    noop.delay_many([{}] * 6000)
    with psycopg.connect(dsn) as pin:
        pin.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        pin.execute(f'SELECT count(*) FROM "{app.schema}".all_jobs').fetchone()
        with psycopg.connect(dsn, autocommit=True, options=WORKER_CONNECTION_OPTIONS) as conn:
            last: ClaimedJob | None = None
            for _ in range(100):
                last = app.queries.claim_jobs(conn, ClaimRequest(WORKER, 50))[-1]
            assert last is not None

            from_start = index_buffers(explain_claim(app, dsn, None))
            from_position = index_buffers(explain_claim(app, dsn, None, after=last.position))
            (params,) = finish_params([Finish.of(last, Outcome.done("null"))])
            finish_plan = explain(app, conn, "finish_jobs", params)
        pin.rollback()

    # The fenced finish reaches its job by primary key, never through jobs_running_idx
    # (which holds a dead entry for each of the 5,000 jobs claimed above).
    assert "Index Scan using jobs_pkey" in finish_plan, finish_plan
    assert "jobs_running_idx" not in finish_plan, finish_plan

    # 5,000 dead-but-unremovable entries (and their heap rows) against a few pages.
    assert from_start > 100, from_start
    assert from_position < 40, from_position
    assert from_position * 5 < from_start


def test_claims_do_not_read_the_entries_of_jobs_due_later(
    app: App, dsn: str, admin: psycopg.Connection[Any]
) -> None:
    """Jobs due far ahead sort after the due ones of their priority in jobs_claim_idx:
    every claim reads each priority level up to its first job due later and stops, so
    30,000 future jobs cost an idle claim (nothing due) a few pages, not a walk of their
    entries (which a scan that can only filter run_at makes: before PostgreSQL 18's
    skip scan, on every poll of every idle worker)."""

    @app.task
    def noop() -> None:
        return None

    admin.execute(
        f'INSERT INTO "{app.schema}".jobs (task_name, queue, priority, args, kwargs,'
        " max_attempts, run_at, meta)"
        " SELECT %s, 'default', (g %% 3 - 1) * 5, '[]', '{}', 3,"
        " now() + interval '365 days' + g * interval '1 second', '{}'"
        " FROM generate_series(1, 30000) AS g",
        (noop.name,),
    )
    admin.execute(f'VACUUM ANALYZE "{app.schema}".jobs')
    position = ClaimPosition(0, dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1), 0)
    for after in (None, position):
        plan = explain_claim(app, dsn, None, after=after)
        assert "rows=0" in plan.splitlines()[0], plan  # nothing claimed
        # Each level's scan stops at its first future entry: a page or two per level.
        assert index_buffers(plan) < 20, plan

    # Due jobs among them are claimed in claim order (priority first), and only they.
    due = [(priority, noop.apply_async(priority=priority).id) for priority in (-5, 0, 5, 0, -5, 5)]
    with psycopg.connect(dsn, autocommit=True, options=WORKER_CONNECTION_OPTIONS) as conn:
        claimed = app.queries.claim_jobs(conn, ClaimRequest(WORKER, 4))
        rest = app.queries.claim_jobs_after(
            conn, ClaimRequest(WORKER, 50, after=claimed[-1].position)
        )
    assert [job.id for job in claimed + rest] == [
        job_id for _, job_id in sorted(due, key=lambda job: (-job[0], job[1]))
    ]


def explain_claim(
    app: App,
    dsn: str,
    queues: tuple[str, ...] | None,
    *,
    after: ClaimPosition | None = None,
    excluded: tuple[str, ...] | None = None,
    task_names: tuple[str, ...] | None = None,
) -> str:
    """EXPLAIN ANALYZE a claim on a worker-configured connection, rolled back."""
    claim = ClaimRequest(WORKER, 50, queues, excluded, task_names, after=after)
    params = claim_statement(claim)
    with psycopg.connect(dsn, autocommit=True, options=WORKER_CONNECTION_OPTIONS) as conn:
        return explain(app, conn, *params)


def explain(app: App, conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> str:
    """EXPLAIN ANALYZE a named statement inside a transaction that is rolled back."""
    with conn.transaction(force_rollback=True):
        rows = conn.execute(
            b"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + app.queries._statements[name], params
        ).fetchall()
    return "\n".join(row[0] for row in rows)


def index_buffers(plan: str) -> int:
    """Shared buffers (hit + read) the plan's scans of jobs_claim_idx touched."""
    total, in_scan = 0, False
    for line in plan.splitlines():
        line = line.strip()
        if line.startswith("->"):
            in_scan = "Index Scan using jobs_claim_idx" in line
        elif in_scan and line.startswith("Buffers: shared"):
            total += sum(
                int(value)
                for key, _, value in (part.partition("=") for part in line.split()[2:])
                if key in ("hit", "read")
            )
    return total


def test_a_claim_from_the_position_takes_higher_priorities_then_the_rest_of_its_own_then_lower(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task
    def noop() -> None:
        return None

    first = [noop.apply_async(priority=0) for _ in range(3)]
    position = app.queries.claim_jobs(admin, ClaimRequest(WORKER, 2))[-1].position
    assert position.id == first[1].id
    past = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)
    behind = noop.apply_at(past)  # priority 0, sorts before the position
    urgent = noop.apply_async(priority=5)
    later = noop.apply_async(priority=0)
    low = noop.apply_async(priority=-5)

    jobs = app.queries.claim_jobs_after(admin, ClaimRequest(WORKER, 10, after=position))

    assert [job.id for job in jobs] == [urgent.id, first[2].id, later.id, low.id]
    # Read from the start, the job behind the position is claimed.
    jobs = app.queries.claim_jobs(admin, ClaimRequest(WORKER, 10))
    assert [job.id for job in jobs] == [behind.id]


def test_a_worker_busy_with_a_backlog_claims_a_job_that_sorts_behind_it_within_a_poll(
    app: App,
) -> None:
    from tests.support.inprocess import running_worker

    @app.task
    def step() -> None:
        time.sleep(0.005)

    step.delay_many([{}] * 3000)
    with running_worker(app, concurrency=4, poll_interval=0.2):
        wait_until(lambda: worker_done(app) >= 200, timeout=30, message="the backlog to start")
        straggler = step.apply_at(dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1))
        enqueued = time.monotonic()
        wait_until(
            lambda: straggler.status().value == "done",
            timeout=10,
            message="the job sorting behind the worker's position to run",
        )
        waited = time.monotonic() - enqueued
        pending_left = 3000 - worker_done(app)
    # It did not wait for the backlog to drain (the claim from the start, every poll
    # interval, found it).
    assert pending_left > 0 or waited < 2.0, (pending_left, waited)


def worker_done(app: App) -> int:
    with app.connection() as conn:
        row = conn.execute(
            f"SELECT count(*) FROM \"{app.schema}\".all_jobs WHERE status = 'done'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_worker_connections_plan_the_claims_and_the_finish_once_with_the_same_shape(
    app: App, dsn: str
) -> None:
    """Worker connections use generic plans (planned once per connection): each must be
    the same ordered index walk or primary-key lookup as the planned-per-call one."""

    @app.task
    def noop() -> None:
        return None

    noop.delay_many([{}] * 2000)
    position = ClaimPosition(0, dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1), 0)
    for queues, excluded in ((None, None), (("default",), None), (None, ("paused",))):
        # A claim alone runs its announced form (one notification): the same walk.
        for announced in ("", "_announced"):
            name, params = claim_statement(ClaimRequest(WORKER, 50, queues, excluded))
            plan = generic_plan(app, dsn, name + announced, params)
            assert plan.count("Index Scan using jobs_claim_idx") == 1, plan
            assert re.findall(r"Sort Key: (.*)", plan) == ["levels_1.priority DESC"], plan
            assert "Bitmap" not in plan and "Seq Scan" not in plan, plan

            claim = ClaimRequest(WORKER, 50, queues, excluded, after=position)
            name, params = claim_statement(claim)
            plan = generic_plan(app, dsn, name + announced, params)
            assert plan.count("Index Scan using jobs_claim_idx") == 3, plan
            assert "ROW(run_at, id) > ROW(" in plan, plan
            # Sorted: only the priorities above the position's, never jobs.
            assert re.findall(r"Sort Key: (.*)", plan) == [
                "higher_1.priority DESC",
                "lower_1.priority DESC",
            ], plan
            assert "Bitmap" not in plan and "Seq Scan" not in plan, plan

    (params,) = finish_params([Finish(1, WORKER, 1, "done", result_json="null")])
    plan = generic_plan(app, dsn, "finish_jobs", params)
    assert "Index Scan using jobs_pkey" in plan, plan
    assert "jobs_running_idx" not in plan and "Seq Scan" not in plan, plan


def generic_plan(app: App, dsn: str, name: str, params: dict[str, Any]) -> str:
    """The plan a worker connection runs ``name`` with: prepared by psycopg as the worker's
    statements are, then EXPLAIN EXECUTE of that prepared statement (values inlined)."""
    statement = app.queries._statements[name]
    order = list(dict.fromkeys(re.findall(rb"%\((\w+)\)s", statement)))
    with psycopg.connect(dsn, options=WORKER_CONNECTION_OPTIONS) as conn:
        conn.execute(statement, params, prepare=True)
        row = conn.execute(
            "SELECT name, generic_plans FROM pg_prepared_statements WHERE NOT from_sql"
        ).fetchone()
        assert row is not None
        prepared, generic_plans = row
        assert generic_plans == 1, "the worker's statement was not planned generically"
        cursor = psycopg.ClientCursor(conn)
        values = [params[key.decode()] for key in order]
        cursor.execute(
            f"EXPLAIN (COSTS OFF) EXECUTE {prepared}({', '.join(['%s'] * len(values))})",
            values,
        )
        plan = "\n".join(line for (line,) in cursor.fetchall())
        conn.rollback()
    return plan
