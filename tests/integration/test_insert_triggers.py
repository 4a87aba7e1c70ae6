"""The jobs table's insert path (migration lighter_inserts): no BEFORE ROW trigger, so a
COPY's rows are batched; the statement triggers that took their place still turn relative
deadlines into absolute ones and stamp the limits the app does not declare, on every
insert path (one job, a batch, COPY, hand-written SQL); migrate leaves the runtime-limits
trigger off while no such limit is stored, and on while one is.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
from psycopg import sql

from pgtasks import App
from pgtasks._app import controls
from pgtasks._store.controls import ADVISORY_LOCK_CLASS_RUNTIME_LIMITS
from pgtasks._store.inserts import COPY_MIN_JOBS
from tests.support.inprocess import select
from tests.support.waiting import wait_until


def runtime_trigger_enabled(app: App) -> bool:
    with app.connection() as conn:
        return app.queries.get_runtime_limits_trigger(conn)


def test_jobs_has_no_before_row_insert_trigger(app: App, admin: psycopg.Connection[Any]) -> None:
    # tgtype bits: 1 row, 2 before, 4 insert. A disabled one counts too: PostgreSQL makes
    # every COPY into a table with one insert row by row.
    rows = select(
        admin,
        app,
        "SELECT tgname FROM pg_trigger WHERE tgrelid = '{schema}.jobs'::regclass"
        " AND NOT tgisinternal AND tgtype::int & 7 = 7",
    )
    assert rows == []


def test_relative_deadlines_become_absolute_on_every_insert_path(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task(name="timed")
    def timed(n: int) -> int:
        return n

    one = timed.apply_async(args=(0,), expires=60)
    many = timed.delay_many([((n,), {}) for n in range(COPY_MIN_JOBS)], meta={})
    table = sql.Identifier(app.schema, "jobs")
    copy = sql.SQL("COPY {} (task_name, queue, args, kwargs, max_attempts, meta) FROM STDIN")
    with admin.cursor().copy(copy.format(table)) as writer:
        writer.write_row(("timed", "default", "[]", "{}", 1, '{"pgtasks.expires_in": 120}'))
        writer.write_row(("timed", "default", "[]", "{}", 1, '{"pgtasks.expires_in": "x"}'))
        writer.write_row(("timed", "default", "[]", "{}", 1, "{}"))
    rows = select(
        admin,
        app,
        "SELECT id, meta ? 'pgtasks.expires_in',"
        " (meta ->> 'pgtasks.expires')::float8 - extract(epoch FROM clock_timestamp())"
        " FROM {schema}.jobs ORDER BY id",
    )
    leads = {job_id: (raw, lead) for job_id, raw, lead in rows}
    assert not any(raw for raw, _ in leads.values())
    assert 50 < leads[one.id][1] <= 60
    assert all(leads[handle.id][1] is None for handle in many)
    copied = sorted(job_id for job_id in leads if job_id > max(h.id for h in many))
    assert len(copied) == 3
    assert 110 < leads[copied[0]][1] <= 120
    # Not a number: dropped, as before (no deadline); no meta: untouched.
    assert leads[copied[1]][1] is None and leads[copied[2]][1] is None


def test_an_undeclared_limit_is_stamped_on_every_insert_path(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task(name="capped")
    def capped(n: int) -> int:
        return n

    @app.task(name="free")
    def free(n: int) -> int:
        return n

    app.migrate()  # a schema with no undeclared limit: the trigger is off
    assert not runtime_trigger_enabled(app)
    controls.set_limit(app, "task:capped", concurrency=2)
    assert runtime_trigger_enabled(app)
    app.migrate()  # one is stored: it stays on
    assert runtime_trigger_enabled(app)

    one = capped.delay(0)
    many = capped.delay_many([((n,), {}) for n in range(COPY_MIN_JOBS)])
    inside = capped.apply_async(args=(1,), idempotency_key="k1")
    other = free.delay_many([((n,), {}) for n in range(COPY_MIN_JOBS)])
    select(
        admin,
        app,
        "INSERT INTO {schema}.jobs (task_name, queue, args, kwargs, max_attempts, limit_groups)"
        " VALUES ('capped', 'default', %s, %s, 1, ARRAY['queue:elsewhere', 'task:capped'])"
        " RETURNING id",
        ["[]", "{}"],
    )
    rows = select(admin, app, "SELECT id, task_name, limit_groups FROM {schema}.jobs")
    groups = {job_id: (task, limit_groups) for job_id, task, limit_groups in rows}
    for handle in [one, inside, *many]:
        assert groups[handle.id][1] == ["task:capped"]
    assert all(groups[handle.id][1] is None for handle in other)
    # A row that already names the limit keeps its groups as they are (sorted, once).
    assert sorted(
        limit_groups
        for task, limit_groups in groups.values()
        if limit_groups and len(limit_groups) > 1
    ) == [["queue:elsewhere", "task:capped"]]

    controls.reset_limit(app, "task:capped")
    assert not runtime_trigger_enabled(app)
    later = capped.delay(2)
    rows = select(admin, app, "SELECT limit_groups FROM {schema}.jobs WHERE id = %s", [later.id])
    assert rows == [(None,)]


def test_a_limit_stored_while_another_is_removed_keeps_the_trigger_on(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    """The reset of the last runtime limit disables the trigger; a runtime limit stored
    while that reset has not committed must find the trigger off and turn it on again
    (before the runtime-limits lock, it read the trigger still on, skipped enabling it,
    and the trigger stayed off with its limit stored)."""

    @app.task(name="first")
    def first() -> None: ...

    @app.task(name="second")
    def second() -> None: ...

    app.migrate()
    controls.set_limit(app, "task:first", concurrency=1)
    assert runtime_trigger_enabled(app)
    audit = sql.Identifier(app.schema, "audit_log")
    errors: list[BaseException] = []

    def attempt(action: Any) -> threading.Thread:
        def run() -> None:
            try:
                action()
            except BaseException as error:  # reported by the test's thread
                errors.append(error)

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    def waiting_on_locks() -> int:
        """This schema's statements waiting for a lock, and waits for its runtime-limits
        lock (the statement text of an advisory lock does not name the schema)."""
        rows = admin.execute(
            "SELECT (SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            "         AND pid <> pg_backend_pid() AND query LIKE %s"
            "         AND query NOT LIKE 'LOCK TABLE%%')"
            "     + (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            "         AND classid = %s::bigint::oid"
            "         AND objid = (hashtext(%s)::bigint & 4294967295)::oid)",
            [f"%{app.schema}%", ADVISORY_LOCK_CLASS_RUNTIME_LIMITS, app.schema],
        ).fetchall()
        return int(rows[0][0])

    with psycopg.connect(admin.info.dsn) as holder:
        # The reset stops after disabling the trigger, before it commits: at its audit row.
        holder.execute(sql.SQL("LOCK TABLE {} IN SHARE MODE").format(audit))
        resetting = attempt(lambda: controls.reset_limit(app, "task:first"))
        wait_until(lambda: waiting_on_locks() >= 1, message="the reset waiting at the audit")
        setting = attempt(lambda: controls.set_limit(app, "task:second", concurrency=1))
        wait_until(lambda: waiting_on_locks() >= 2, message="the second change waiting")
        holder.commit()
    resetting.join(30)
    setting.join(30)
    assert not resetting.is_alive() and not setting.is_alive()
    assert errors == []
    with app.connection() as conn:
        assert app.queries.count_runtime_limits(conn) == 1
    assert runtime_trigger_enabled(app)
    job = second.delay()
    rows = select(admin, app, "SELECT limit_groups FROM {schema}.jobs WHERE id = %s", [job.id])
    assert rows == [(["task:second"],)]
