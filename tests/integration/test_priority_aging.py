"""Priority aging (App(priority_aging=)): a due job's priority rises one level per interval
waited, so low-priority work is not starved by a stream of higher-priority work; the claim
reads jobs_claim_idx (EXPLAIN)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from pgtasks import App, ConfigurationError
from pgtasks._leases import ClaimedJob, ClaimRequest


def _claim(app: App, limit: int, aging: float | None) -> list[ClaimedJob]:
    with app.connection() as conn:
        worker = app.queries.register_worker(conn, hostname="h", pid=1, queues=None, concurrency=8)
        claim = ClaimRequest(worker, limit, aging=aging)
        return list(app.queries.finish_and_claim_jobs(conn, (), claim).claimed)


def _age(admin: psycopg.Connection[Any], app: App, ids: list[int], seconds: float) -> None:
    admin.execute(
        f"UPDATE {app.schema}.jobs SET run_at = now() - make_interval(secs => %s)"
        " WHERE id = ANY(%s)",
        (seconds, ids),
    )


def test_an_old_low_priority_job_overtakes_newer_high_priority_ones(
    make_app: Any, admin: psycopg.Connection[Any]
) -> None:
    app = make_app(priority_aging=10)

    @app.task
    def work(n: int) -> None: ...

    low = [work.apply_async((n,), priority=0).id for n in range(2)]
    high = [work.apply_async((n,), priority=5).id for n in range(3)]
    _age(admin, app, low[:1], 61)  # 6 levels: effective 6 > 5
    _age(admin, app, low[1:], 41)  # 4 levels: effective 4 < 5
    _age(admin, app, high, 1)
    # Effective priorities: low[0] 6, the high ones 5, low[1] 4.
    assert {job.id for job in _claim(app, 2, aging=10)} == {low[0], high[0]}
    # Without aging, the stored priorities alone decide.
    assert [job.id for job in _claim(app, 1, aging=None)] == [high[1]]


def test_the_aged_claim_reads_the_claim_index(
    make_app: Any, admin: psycopg.Connection[Any]
) -> None:
    app = make_app(priority_aging=5)

    @app.task
    def work(n: int) -> None: ...

    work.delay_many([{"n": n} for n in range(500)])
    for priority in (3, 7):
        work.apply_async((priority,), priority=priority)
    admin.execute(f"ANALYZE {app.schema}.jobs")
    text = app.queries._statements["claim_jobs_aged"].decode()
    select = text[: text.rindex("\nUPDATE ")].replace("picked AS (", "picked AS MATERIALIZED (")
    query = (
        select.replace("%(queues)s", "NULL")
        .replace("%(excluded_queues)s", "NULL")
        .replace("%(task_names)s", "NULL")
        .replace("%(aging)s", "5")
        .replace("%(aged_queues)s", "ARRAY['slow']")
        .replace("%(aged_seconds)s", "ARRAY[60]")
        .replace("%(limit)s", "10")
        + " SELECT id FROM picked"
    )
    plan = admin.execute("EXPLAIN (FORMAT JSON) " + query).fetchone()
    assert plan is not None
    rendered = str(plan[0])
    assert "jobs_claim_idx" in rendered
    assert "Seq Scan" not in rendered


def test_a_bad_aging_interval_is_refused(make_app: Any) -> None:
    with pytest.raises(ConfigurationError, match="priority_aging="):
        make_app(priority_aging=0, migrate=False)


def test_workers_take_the_apps_aging(make_app: Any) -> None:
    from pgtasks import Worker

    app = make_app(priority_aging=2.5, migrate=False)
    assert Worker(app).settings.priority_aging == 2.5
    assert Worker(make_app(migrate=False)).settings.priority_aging is None
