"""Operator reads of workflows, shared by ``pgtasks workflows``, ``doctor`` and the
dashboard: a workflow and its jobs, the list of workflows (by state, by id), one
workflow's page (steps, edges, states, results, timings, incidents) and the incidents of
the workflow machinery.

Each function runs its statements through ``app.database.run`` (or the ``run`` it is
given: the dashboard's own connections) and returns values of ``pgtasks._workflows_text``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import psycopg

from .._errors import WorkflowNotFoundError
from .._workflows_text import (
    INCIDENT_KINDS,
    WORKFLOW_STATES,
    WorkflowDetail,
    WorkflowIncident,
    WorkflowStep,
    WorkflowSummary,
)
from .routing import RoutedApp

if TYPE_CHECKING:
    from .._store.ports import AdminPort


class WorkflowsApp(RoutedApp, Protocol):
    """What the workflow reads take of an App: its database, its statements and the
    routing of an id to the store that issued it."""


#: Characters of a step's result (as JSON text) a workflow page reads.
MAX_RESULT_CHARS = 2000
#: A result stored in more bytes than this is not rendered on a workflow page (its size is).
MAX_RESULT_BYTES = 65_536

T = TypeVar("T")
#: Runs a read on a connection (``app.database.run``, or the dashboard's own pool's).
Runner = Callable[[Callable[[psycopg.Connection[Any]], T]], T]


def _missing(workflow_id: int) -> WorkflowNotFoundError:
    return WorkflowNotFoundError(
        f"workflow {workflow_id} does not exist (its jobs may have been pruned)"
    )


def describe_workflow(
    app: WorkflowsApp, workflow_id: int, *, limit: int | None = None
) -> dict[str, Any]:
    """The workflow's row and its jobs (``app.get_workflow``); with ``limit``, its first
    ``limit`` jobs by id, and when it has more, ``jobs_by_status`` (every job counted by
    status: a group of a million members is not read whole)."""
    app = app.routing.for_id(workflow_id)  # the store that issued the id
    queries: AdminPort = app.queries

    def read(conn: psycopg.Connection[Any]) -> dict[str, Any] | None:
        row = queries.get_workflow(conn, workflow_id)
        if row is None:
            return None
        wanted = None if limit is None else limit + 1
        jobs = queries.get_workflow_jobs(conn, workflow_id, limit=wanted)
        if limit is None or len(jobs) <= limit:
            return {**row, "jobs": jobs}
        counts = queries.count_workflow_jobs(conn, workflow_id)
        return {**row, "jobs": jobs[:limit], "jobs_by_status": counts}

    described = app.database.run(read)
    if described is None:
        raise _missing(workflow_id)
    return described


def list_workflows(
    app: WorkflowsApp,
    *,
    status: str | None = None,
    workflow_id: int | None = None,
    before: int | None = None,
    limit: int = 50,
    run: Runner[Any] | None = None,
    steps_cap: int | None = None,
) -> list[WorkflowSummary]:
    """Workflows newest first: all, those in one state (``WORKFLOW_STATES``), the one
    with id ``workflow_id`` (a search), those with ids below ``before`` (the next page).
    Of ``app``'s store (an App of several stores: its default one), or of the store that
    issued ``workflow_id``; with ``run``, of the store its connections are (the caller's
    store: a dashboard's). ``steps_cap``: count at most that many jobs of each workflow,
    plus one (None: all; see the store's list_workflows); a workflow with more has
    ``steps_capped`` set."""
    if status is not None and status not in WORKFLOW_STATES:
        raise ValueError(f"status: {status!r} is not one of {', '.join(WORKFLOW_STATES)}")
    if workflow_id is not None and run is None:
        app = app.routing.for_id(workflow_id)
    queries: AdminPort = app.queries
    rows: list[dict[str, Any]] = (run or app.database.run)(
        lambda conn: queries.list_workflows(
            conn,
            status=status,
            workflow_id=workflow_id,
            before=before,
            limit=limit,
            steps_cap=steps_cap,
        )
    )
    return [
        WorkflowSummary.from_row(
            {**row, "steps_capped": steps_cap is not None and row["steps"] > steps_cap}
        )
        for row in rows
    ]


def workflow_detail(
    app: WorkflowsApp,
    workflow_id: int,
    *,
    max_result: int = MAX_RESULT_CHARS,
    max_steps: int | None = None,
    max_incidents: int = 100,
    run: Runner[Any] | None = None,
) -> WorkflowDetail:
    """One workflow's page: its summary, its jobs (the first ``max_steps`` by id; None:
    all) with their links, states, attempts, timings, results (cut to ``max_result``
    characters) and last error lines, and its newest incidents. WorkflowNotFoundError
    when it does not exist. Read in the store that issued the id, or with ``run`` in the
    store its connections are (the caller's store: a dashboard's)."""
    if run is None:
        app = app.routing.for_id(workflow_id)  # the store that issued the id

    def read(conn: psycopg.Connection[Any]) -> WorkflowDetail | None:
        store: AdminPort = app.queries
        rows = store.list_workflows(conn, workflow_id=workflow_id, limit=1)
        if not rows:
            return None
        steps = store.get_workflow_steps(
            conn,
            workflow_id,
            WorkflowStep.from_tuple,
            max_result=max_result,
            max_result_bytes=MAX_RESULT_BYTES,
            limit=max_steps,
        )
        incidents = store.list_workflow_incidents(
            conn, workflow_id=workflow_id, limit=max_incidents
        )
        return WorkflowDetail(
            summary=WorkflowSummary.from_row(rows[0]),
            steps=steps,
            incidents=[WorkflowIncident.from_row(row) for row in incidents],
        )

    detail: WorkflowDetail | None = (run or app.database.run)(read)
    if detail is None:
        raise _missing(workflow_id)
    return detail


def workflow_incidents(
    app: WorkflowsApp, *, workflow_id: int | None = None, kind: str | None = None, limit: int = 50
) -> list[WorkflowIncident]:
    """Incidents newest first (of one workflow, in the store that issued its id; or all
    of ``app``'s store), of one kind or all."""
    if kind is not None and kind not in INCIDENT_KINDS:
        raise ValueError(f"kind: {kind!r} is not one of {', '.join(INCIDENT_KINDS)}")
    if workflow_id is not None:
        app = app.routing.for_id(workflow_id)
    queries: AdminPort = app.queries
    rows = app.database.run(
        lambda conn: queries.list_workflow_incidents(
            conn, workflow_id=workflow_id, kind=kind, limit=limit
        )
    )
    return [WorkflowIncident.from_row(row) for row in rows]
