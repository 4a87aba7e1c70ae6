"""What the dashboard's workflow pages read (the workflows list and one workflow's page),
on the dashboard's own connections (:class:`~pgtasks.web.reads.DashboardDatabase`).

The reads are ``pgtasks workflows``' (``pgtasks._app.workflow_admin``), run on the
dashboard's pool and timed by the database's clock, except that a page of finished
workflows in one state reads a bounded number of jobs and says where it stopped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from .._app.workflow_admin import list_workflows, workflow_detail
from .._workflows_text import WorkflowDetail, WorkflowSummary
from .reads import WORKFLOW_STEPS_CAP, DashboardDatabase

if TYPE_CHECKING:
    from .._app.app import App

T = TypeVar("T")

#: Steps (jobs, by id) a workflow page reads and draws at most; a larger workflow's page
#: says how many it does not show (the jobs list filtered by workflow lists them all).
GRAPH_STEPS = 2_000
#: Characters of a step's result a workflow page reads (its graph and table cut further).
STEP_RESULT_CHARS = 200
#: Incidents a workflow page lists (newest first).
WORKFLOW_INCIDENTS = 50


#: Workflow jobs a page of finished workflows in one state (done, failed, cancelled)
#: reads at most: no index finds them, so a rare state's page costs what a common one's
#: does, and says where it stopped.
WORKFLOW_SCAN_JOBS = 5_000
#: The workflows list's counts (all, running) stop at this many.
WORKFLOW_COUNT_CAP = 10_000


@dataclasses.dataclass(frozen=True)
class WorkflowsPage:
    now: datetime
    workflows: list[WorkflowSummary]
    more: bool
    #: The workflows in all and the running ones (each counted up to WORKFLOW_COUNT_CAP).
    total: int = 0
    running: int = 0
    #: A finished state's page read WORKFLOW_SCAN_JOBS jobs and is not full: the oldest
    #: workflow id it searched (``?before=`` it goes on), else None.
    searched_to: int | None = None


@dataclasses.dataclass(frozen=True)
class WorkflowPage:
    now: datetime
    detail: WorkflowDetail

    @property
    def summary(self) -> WorkflowSummary:
        return self.detail.summary

    @property
    def hidden_steps(self) -> int:
        """Jobs of the workflow its page does not read (past GRAPH_STEPS)."""
        return max(0, self.detail.summary.steps - len(self.detail.steps))


class _Timed:
    """A runner for the workflow reads (``workflow_admin``) on the dashboard's own
    connections that also reads the database's time in the same connection."""

    def __init__(self, database: DashboardDatabase) -> None:
        self.database = database
        self.now: datetime | None = None

    def __call__(self, operation: Callable[[psycopg.Connection[Any]], T]) -> T:
        def timed(conn: psycopg.Connection[Any]) -> T:
            result = operation(conn)
            self.now = self.database.queries.get_database_time(conn)
            return result

        return self.database.run(timed)

    @property
    def time(self) -> datetime:
        if self.now is None:  # pragma: no cover - every read sets it
            raise RuntimeError("the database's time was not read")
        return self.now


def workflows_page(
    app: App,
    database: DashboardDatabase,
    *,
    status: str | None,
    workflow_id: int | None,
    before: int | None,
    limit: int,
) -> WorkflowsPage:
    """Up to ``limit`` workflows (newest first, ids below ``before``; in one state; the
    one ``workflow_id``), whether more follow, and the counts of the state tabs:
    ``pgtasks workflows list``'s read, except that a finished state (done, failed,
    cancelled) is looked for among the workflows of the newest WORKFLOW_SCAN_JOBS jobs
    only (``searched_to`` says where it stopped)."""
    run = _Timed(database)
    searched_to = None
    if workflow_id is None and status in ("done", "failed", "cancelled"):

        def scan(conn: psycopg.Connection[Any]) -> list[WorkflowSummary]:
            nonlocal searched_to
            rows, floor, scanned = database.queries.list_workflows_scan(
                conn,
                status=status,
                before=before,
                limit=limit + 1,
                scan=WORKFLOW_SCAN_JOBS,
                steps_cap=WORKFLOW_STEPS_CAP,
            )
            if len(rows) <= limit and scanned >= WORKFLOW_SCAN_JOBS and floor is not None:
                searched_to = int(floor)
            return [WorkflowSummary.from_row(row) for row in rows]

        found = run(scan)
    else:
        found = list_workflows(
            app,
            status=status,
            workflow_id=workflow_id,
            before=before,
            limit=limit + 1,
            run=run,
            steps_cap=WORKFLOW_STEPS_CAP,
        )
    counts = run(lambda conn: database.queries.count_workflows(conn, cap=WORKFLOW_COUNT_CAP))
    return WorkflowsPage(
        now=run.time,
        workflows=found[:limit],
        more=len(found) > limit,
        total=int(counts["total"]),
        running=int(counts["running"]),
        searched_to=searched_to,
    )


def workflow_page(app: App, database: DashboardDatabase, workflow_id: int) -> WorkflowPage:
    """One workflow's page: its summary, its first GRAPH_STEPS steps and its newest
    incidents; WorkflowNotFoundError when it does not exist."""
    run = _Timed(database)
    detail = workflow_detail(
        app,
        workflow_id,
        max_result=STEP_RESULT_CHARS,
        max_steps=GRAPH_STEPS,
        max_incidents=WORKFLOW_INCIDENTS,
        run=run,
    )
    return WorkflowPage(now=run.time, detail=detail)
