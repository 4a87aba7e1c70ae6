"""The claim's query plan: an ordered walk of jobs_claim_idx, even with stale statistics."""

from __future__ import annotations

from typing import Any

import psycopg

from pgtasks import App
from pgtasks._services import WORKER_CONNECTION_OPTIONS


def test_claim_walks_the_pending_index_in_order_even_with_stale_statistics(
    app: App, dsn: str, admin: psycopg.Connection[Any]
) -> None:
    @app.task
    def noop() -> None:
        return None

    # Statistics taken on an empty table, then 5,000 pending jobs: the estimate is wrong.
    admin.execute(f'ANALYZE "{app.schema}".jobs')
    noop.delay_many([{}] * 5000)

    for queues in (None, ["default"]):
        plan = explain_claim(app, dsn, queues)
        assert "Index Scan using jobs_claim_idx" in plan, plan
        assert "Sort" not in plan, plan
        assert "Bitmap" not in plan, plan


def explain_claim(app: App, dsn: str, queues: list[str] | None) -> str:
    """EXPLAIN ANALYZE the claim on a worker-configured connection, rolled back."""
    plan: list[str] = []
    with psycopg.connect(dsn, options=WORKER_CONNECTION_OPTIONS) as conn:
        params: dict[str, Any] = app.store._claim_params(10**9, queues, 50, None)
        rows = conn.execute(
            b"EXPLAIN (ANALYZE, COSTS OFF) " + app.store._statements["claim_jobs"], params
        ).fetchall()
        plan = [row[0] for row in rows]
        conn.rollback()
    return "\n".join(plan)
