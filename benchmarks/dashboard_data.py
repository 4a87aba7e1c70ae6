"""The tables of ``python -m benchmarks.dashboard``: 1,000,000 jobs (and their
workflows) bulk-inserted into the schema ``pgtasks_bench_dashboard``, the three large
workflows enqueued through the API, moved to jobs_history as a finish moves them, and
the ids the pages show.
What each row is: see benchmarks/dashboard.py."""

from __future__ import annotations

import time

import psycopg
from psycopg import sql

from benchmarks.history_prune import move_into_history
from pgtasks import App

PAGES_SCHEMA = "pgtasks_bench_dashboard"

POPULATE = """
INSERT INTO {schema}.jobs (task_name, queue, priority, args, kwargs, status, attempts,
                           max_attempts, run_at, locked_at, locked_by, last_error, result,
                           created_at, updated_at, finished_at, started_at, meta,
                           workflow_id, workflow_step, unique_key, limit_groups, limit_key,
                           prev_ids, next_ids, waiting_for)
SELECT 'bench.task_' || (i %% 10),
       'q' || (i %% 5),
       0,
       jsonb_build_array(i, 'user' || (i %% 1000)),
       '{{}}'::jsonb,
       kind.status,
       CASE WHEN kind.status IN ('pending', 'waiting') OR kind.unrun THEN 0 ELSE 1 END,
       3,
       CASE WHEN kind.status = 'pending' AND i %% 2 = 0 THEN now() + interval '1 day'
            ELSE created END,
       CASE WHEN kind.status NOT IN ('pending', 'waiting') AND NOT kind.unrun
            THEN least(now(), created + interval '1 second') END,
       CASE WHEN kind.status = 'running' THEN 1 END,
       CASE WHEN kind.status = 'failed' THEN 'Traceback (most recent call last):'
            || E'\\nValueError: bad input ' || i END,
       CASE WHEN kind.status = 'done' THEN to_jsonb(i) END,
       created,
       created,
       CASE WHEN kind.status IN ('done', 'failed', 'cancelled')
            THEN least(now(), created + interval '2 seconds') END,
       CASE WHEN kind.status NOT IN ('pending', 'waiting') AND NOT kind.unrun
            THEN least(now(), created + interval '1 second') END,
       CASE WHEN kind.status = 'running' AND i %% 20 = 19
            THEN jsonb_build_object('pgtasks.progress', jsonb_build_object(
                     'current', i %% 100, 'total', 100, 'message', 'rows'))
            ELSE '{{}}'::jsonb END,
       CASE WHEN wf.step THEN wf.workflow END,
       CASE WHEN wf.step THEN wf.label END,
       CASE WHEN i %% 50 = 3 THEN 'unique:' || i END,
       -- Limits (LIMITS): bench.task_8 per key (500 keys), bench.task_6 at a rate, queue q4
       -- (bench.task_4 and bench.task_9), bench.task_9's concurrency.
       CASE i %% 10 WHEN 8 THEN ARRAY['key:bench.task_8' || chr(31) || 'k' || ((i / 10) %% 500)]
                    WHEN 6 THEN ARRAY['task:bench.task_6']
                    WHEN 4 THEN ARRAY['queue:q4']
                    WHEN 9 THEN ARRAY['queue:q4', 'task:bench.task_9'] END,
       CASE WHEN i %% 10 = 8 THEN 'k' || ((i / 10) %% 500) END,
       CASE WHEN wf.step THEN wf.prev END,
       CASE WHEN wf.step THEN wf.next END,
       CASE WHEN wf.step AND kind.status = 'waiting' THEN cardinality(wf.prev) ELSE 0 END
FROM generate_series(1, %(jobs)s::int) AS i
CROSS JOIN LATERAL (
    SELECT now() - (%(jobs)s::int - i) * interval '30 days' / %(jobs)s::int AS created
) AS at
-- One job in 10 is a step of a workflow of 5 (the jobs i, i + 10, … i + 40): its
-- number, position, shape (a chain, a group, a chord of 4, a chain of a group of 3),
-- step label, links and the state its workflow ends in.
CROSS JOIN LATERAL (
    SELECT i %% 10 = 7 AS step, (i / 10) / 5 + 1 AS workflow, (i / 10) %% 5 AS position,
           ((i / 10) / 5 + 1) %% 4 AS shape,
           CASE WHEN (i / 10) / 5 + 1 > %(jobs)s::int / 50 - 20
                  OR ((i / 10) / 5 + 1) %% 500 = 250 THEN 'running'
                WHEN ((i / 10) / 5 + 1) %% 20 = 3 THEN 'failed'
                WHEN ((i / 10) / 5 + 1) %% 100 = 41 THEN 'cancelled'
                ELSE 'done' END AS state
) AS w
CROSS JOIN LATERAL (
    SELECT w.step, w.workflow,
           CASE w.shape WHEN 2 THEN CASE WHEN w.position < 4 THEN '0.' || w.position
                                         ELSE '1' END
                        WHEN 3 THEN CASE WHEN w.position = 0 THEN '0'
                                         WHEN w.position < 4 THEN '1.' || (w.position - 1)
                                         ELSE '2' END
                        ELSE w.position::text END AS label,
           CASE w.shape WHEN 0 THEN CASE WHEN w.position > 0 THEN ARRAY[i - 10] END
                        WHEN 2 THEN CASE WHEN w.position = 4
                                         THEN ARRAY[i - 40, i - 30, i - 20, i - 10] END
                        WHEN 3 THEN CASE WHEN w.position = 4 THEN ARRAY[i - 30, i - 20, i - 10]
                                         WHEN w.position > 0 THEN ARRAY[i - 10 * w.position]
                                    END
                        END::bigint[] AS prev,
           CASE w.shape WHEN 0 THEN CASE WHEN w.position < 4 THEN ARRAY[i + 10] END
                        WHEN 2 THEN CASE WHEN w.position < 4
                                         THEN ARRAY[i + 10 * (4 - w.position)] END
                        WHEN 3 THEN CASE WHEN w.position = 0 THEN ARRAY[i + 10, i + 20, i + 30]
                                         WHEN w.position < 4
                                         THEN ARRAY[i + 10 * (4 - w.position)] END
                        END::bigint[] AS next,
           CASE w.state
                WHEN 'done' THEN 'done'
                WHEN 'failed' THEN CASE WHEN w.position < 2 THEN 'done'
                                        WHEN w.position = 2 THEN 'failed'
                                        WHEN w.shape = 1 THEN 'done'
                                        ELSE 'cancelled' END
                WHEN 'cancelled' THEN CASE WHEN w.position = 0 THEN 'done' ELSE 'cancelled' END
                ELSE CASE WHEN w.position = 0 THEN 'running'
                          WHEN w.shape = 1 THEN 'pending'
                          ELSE 'waiting' END
           END AS status
) AS wf
CROSS JOIN LATERAL (
    SELECT CASE WHEN wf.step THEN wf.status
                WHEN i <= 20 * 100 AND i %% 100 IN (98, 99) THEN 'running'
                WHEN i %% 100 < 90 THEN 'done'
                WHEN i %% 100 < 95 THEN 'failed'
                WHEN i %% 100 = 95 THEN 'cancelled'
                ELSE 'pending' END AS status,
           -- A step cancelled before it ran (after a failed one, or by the user).
           wf.step AND wf.status = 'cancelled' AS unrun
) AS kind
"""

#: The workflows rows of the populated steps: one per 5 steps, created with its first.
WORKFLOWS = """
INSERT INTO {schema}.workflows (id, kind, shape, created_at)
OVERRIDING SYSTEM VALUE
SELECT w,
       CASE w %% 4 WHEN 1 THEN 'group' WHEN 2 THEN 'chord' ELSE 'chain' END,
       CASE w %% 4 WHEN 0 THEN 'bench.task_7 → bench.task_7 → bench.task_7 → bench.task_7'
                               || ' → bench.task_7'
                   WHEN 1 THEN '[5 x bench.task_7]'
                   WHEN 2 THEN '[4 x bench.task_7] → bench.task_7'
                   ELSE 'bench.task_7 → [3 x bench.task_7] → bench.task_7' END,
       now() - (%(jobs)s::int - ((w - 1) * 50 + 7)) * interval '30 days' / %(jobs)s::int
FROM generate_series(1, %(jobs)s::int / 50) AS w
"""
#: The limits the populated jobs count in (as workers store them).
LIMITS = """
INSERT INTO {schema}.limits (name, concurrency, rate_count, rate_period, burst, tokens)
VALUES ('key:bench.task_8', 2, NULL, NULL, 1, 1),
       ('task:bench.task_9', 20, NULL, NULL, 1, 1),
       ('queue:q4', 50, NULL, NULL, 1, 1),
       ('task:bench.task_6', NULL, 100, 1, 10, 3)
"""
WORKFLOWS_SEQUENCE = """
SELECT setval(pg_get_serial_sequence(%(table)s, 'id'), greatest(1, %(jobs)s::int / 50))
"""


def drop(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def populate(dsn: str, app: App, jobs: int, reuse: bool) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        table = sql.SQL("{}.all_jobs").format(sql.Identifier(PAGES_SCHEMA))
        if reuse:
            row = conn.execute(
                "SELECT to_regclass(%s) IS NOT NULL", [f'"{PAGES_SCHEMA}".all_jobs']
            ).fetchone()
            if row and row[0]:
                count = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()
                # The populated jobs and the steps of the large workflows.
                if count and count[0] == jobs + LARGE_STEPS:
                    print(f"reusing {jobs:,} jobs in schema {PAGES_SCHEMA}")
                    return
    drop(dsn, PAGES_SCHEMA)
    app.migrate()
    started = time.perf_counter()
    schema = sql.Identifier(PAGES_SCHEMA)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(POPULATE).format(schema=schema), {"jobs": jobs})
        conn.execute(sql.SQL(WORKFLOWS).format(schema=schema), {"jobs": jobs})
        conn.execute(sql.SQL(LIMITS).format(schema=schema))
        conn.execute(WORKFLOWS_SEQUENCE, {"jobs": jobs, "table": f"{PAGES_SCHEMA}.workflows"})
    large = large_workflows(app)
    with psycopg.connect(dsn, autocommit=True) as conn:
        move_into_history(conn, PAGES_SCHEMA)
    inserted = time.perf_counter() - started
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("VACUUM (ANALYZE) {}.jobs").format(schema))
        conn.execute(sql.SQL("VACUUM (ANALYZE) {}.workflows").format(schema))
    print(
        f"inserted {jobs:,} jobs ({jobs // 50:,} workflows of 5 steps; one INSERT … SELECT"
        f" generate_series) and {sum(large.values()):,} steps of 3 large workflows in"
        f" {inserted:.1f} s, VACUUM ANALYZE in {time.perf_counter() - started - inserted:.1f} s"
    )


#: The large workflows enqueued last (the newest): what each is.
LARGE = {
    "wide": "a chord of 1,000 members, 500 done",
    "deep": "a chain of 200 steps, 100 done",
    "nested": "nested chords, just enqueued",
}


def large_workflows(app: App) -> dict[str, int]:
    """Enqueue LARGE through the API and move them on as workers would (each step's end
    an UPDATE of its own, so the workflow triggers pass its result on); their sizes."""
    from pgtasks import chain, chord

    @app.task(name="bench.fetch")
    def fetch(value: int) -> int:
        return value

    @app.task(name="bench.total")
    def total(values: list[int]) -> int:
        return sum(values)

    wide = chord([fetch.s(item) for item in range(1000)], total.s()).delay()
    deep = chain(fetch.s(0), *[fetch.s() for _ in range(199)]).delay()
    chain(
        fetch.s(1),
        chord([chord([fetch.si(2), fetch.si(3)], total.s()), fetch.si(4)], total.s()),
        fetch.s(),
    ).delay()
    end = (
        "UPDATE {schema}.jobs SET status = 'done', attempts = 1, result = to_jsonb(id),"
        " locked_at = now() - interval '2 seconds', started_at = now() - interval '2 seconds',"
        " finished_at = now() - interval '1 second', updated_at = now() WHERE id = ANY(%s)"
    )
    schema = sql.Identifier(app.schema)
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        members = [job["id"] for job in app.get_workflow(wide.id)["jobs"]][:500]
        conn.execute(sql.SQL(end).format(schema=schema), [members])
        for job in app.get_workflow(deep.id)["jobs"][:100]:
            conn.execute(sql.SQL(end).format(schema=schema), [[job["id"]]])
    return {"wide": 1001, "deep": 200, "nested": 7}


#: The jobs large_workflows enqueues.
LARGE_STEPS = 1001 + 200 + 7


def workflow_ids(dsn: str, jobs: int) -> dict[str, int]:
    """The workflows the pages show: the large ones (the newest three), a failed one half
    way back, and the callback of the chord of 1,000."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        schema = sql.Identifier(PAGES_SCHEMA)
        row = conn.execute(sql.SQL("SELECT max(id) FROM {}.workflows").format(schema)).fetchone()
        newest = int(row[0]) if row and row[0] else 3
        callback = conn.execute(
            sql.SQL(
                "SELECT id FROM {}.all_jobs WHERE workflow_id = %s AND workflow_step = '1'"
            ).format(schema),
            [newest - 2],
        ).fetchone()
    middle = max(1, jobs // 100)
    old = middle - middle % 20 + 3  # a failed one (see POPULATE)
    return {
        "wide": newest - 2,
        "deep": newest - 1,
        "nested": newest,
        "old": old,
        "callback": int(callback[0]) if callback else 1,
    }
