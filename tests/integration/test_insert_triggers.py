"""The jobs table's insert path (migration lighter_inserts): no BEFORE ROW trigger, so a
COPY's rows are batched; the statement triggers that took their place still turn relative
deadlines into absolute ones and stamp the limits the app does not declare, on every
insert path (one job, a batch, COPY, hand-written SQL); migrate leaves the runtime-limits
trigger off while no such limit is stored, and on while one is.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from pgtasks import App
from pgtasks._app import controls
from pgtasks._store.inserts import COPY_MIN_JOBS
from tests.support.inprocess import select


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
