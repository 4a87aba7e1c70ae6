"""The workflows lists (the dashboard's list and overview) cost the same whatever the
size of their workflows: each counts at most a bounded number of a workflow's jobs, and
the running workflows are found by one index probe each, not by reading every unfinished
job of a big group. Checked with EXPLAIN ANALYZE (rows each plan node read), no timing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pgtasks import App, group
from pgtasks._app.workflow_admin import list_workflows
from tests.support.web import Client
from tests.support.workflows import settle, steps

MEMBERS = 120
CAP = 5


@pytest.fixture
def big(app: App) -> Any:
    @app.task(name="member")
    def member(n: int) -> int:
        return n

    return group(member.s(n) for n in range(MEMBERS)).delay()


def most_rows_read(app: App, name: str, params: dict[str, Any]) -> int:
    """The most rows any node of the named statement's plan returned (EXPLAIN ANALYZE,
    rolled back)."""
    with psycopg.connect(app.dsn, autocommit=True) as conn, conn.transaction(force_rollback=True):
        rows = conn.execute(
            b"EXPLAIN (ANALYZE, COSTS OFF) " + app.queries._statements[name], params
        ).fetchall()
    plan = "\n".join(row[0] for row in rows)
    counts = [int(value) for value in re.findall(r"actual time=[\d.]+\.\.[\d.]+ rows=(\d+)", plan)]
    assert counts, plan
    return max(counts)


def test_a_list_counts_a_bounded_number_of_a_big_workflows_jobs(app: App, big: Any) -> None:
    with app.connection() as conn:
        capped = app.queries.list_workflows(conn, steps_cap=CAP)
        running = app.queries.list_workflows(conn, status="running", steps_cap=CAP)
        exact = app.queries.list_workflows(conn)
    assert [(row["id"], row["steps"], row["started_at"]) for row in capped] == [
        (big.id, CAP + 1, None)
    ]
    assert [(row["id"], row["steps"]) for row in running] == [(big.id, CAP + 1)]
    assert [(row["id"], row["steps"], row["steps_done"]) for row in exact] == [(big.id, MEMBERS, 0)]
    # Below the cap, the counts are exact.
    wide = list_workflows(app, steps_cap=MEMBERS)
    assert [(found.steps, found.steps_done) for found in wide] == [(MEMBERS, 0)]

    common = {"before": None, "limit": 50, "steps_cap": CAP}
    listed = {"status": None, "id": None, **common}
    assert most_rows_read(app, "list_workflows", listed) <= CAP + 1
    assert most_rows_read(app, "list_running_workflows", common) <= CAP + 1
    # The running count probes the index once a workflow (it read every entry before).
    assert most_rows_read(app, "count_workflows", {"cap": 10_000}) <= 2
    # Without a cap (one workflow's own page, the CLI), every job is counted.
    assert most_rows_read(app, "list_workflows", {**listed, "steps_cap": None}) >= MEMBERS


def test_a_finished_big_workflow_is_counted_up_to_the_cap_in_the_scan_too(
    app: App, big: Any
) -> None:
    member_ids = [step["id"] for step in steps(app, big.id).values()]
    settle(app, dict.fromkeys(member_ids, 1))
    with app.connection() as conn:
        rows, _, _ = app.queries.list_workflows_scan(
            conn, status="done", limit=10, scan=1_000, steps_cap=CAP
        )
        exact, _, _ = app.queries.list_workflows_scan(conn, status="done", limit=10, scan=1_000)
    assert [(row["id"], row["steps"], row["finished_at"]) for row in rows] == [
        (big.id, CAP + 1, None)
    ]
    assert [(row["steps"], row["steps_done"]) for row in exact] == [(MEMBERS, MEMBERS)]


def test_the_dashboard_lists_a_workflow_past_the_cap_as_more_than_the_cap(
    app: App, big: Any, make_client: Callable[..., Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pgtasks.web import reads, rendering, workflow_reads

    for module in (reads, rendering, workflow_reads):
        monkeypatch.setattr(module, "WORKFLOW_STEPS_CAP", CAP)
    web = make_client()
    for path in ("/workflows", "/workflows?status=running", "/"):
        html = web.get(path).text
        assert f'<tr data-workflow="{big.id}">' in html, path
        assert f"more than {CAP} steps" in html, path
    # The workflow's own page counts every step.
    page = web.get(f"/workflows/{big.id}").text
    assert f"0/{MEMBERS}" in page
