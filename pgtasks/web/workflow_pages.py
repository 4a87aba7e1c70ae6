"""The dashboard's workflow pages: the workflows list (``/workflows``, by state, a search
by id, keyset paging), one workflow's page with its graph (``/workflows/ID``), their live
parts, and Cancel workflow (``pgtasks workflows cancel``).

What they read is in workflow_reads.py; the Dashboard (app.py) renders the pages and
routes here, its actions (actions.py) check the forms. In the dashboard of an app of
several stores, a workflow id names its store: its page, or a search for it, in another
store's dashboard redirects there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from .._app.workflow_admin import list_workflows
from .._errors import WorkflowNotFoundError
from .._workflows_text import WORKFLOW_STATES
from .graph import layout
from .reads import DashboardDatabase
from .requests import is_id, live_url, message, optional_id, query_string, workflow_id_or_404
from .workflow_reads import WORKFLOW_COUNT_CAP, WORKFLOW_SCAN_JOBS, workflow_page, workflows_page

if TYPE_CHECKING:
    from .app import Dashboard

#: Workflows per page of the workflows list.
WORKFLOWS_PAGE_SIZE = 50
#: Steps a workflow page's table lists (in step order); the graph draws them all.
STEP_ROWS = 50


@dataclasses.dataclass(frozen=True)
class WorkflowQuery:
    """What the workflows list shows: workflows in one state (or all), the one with an
    id (a search), ids below ``before`` (the next page)."""

    status: str | None = None
    workflow_id: int | None = None
    before: int | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> WorkflowQuery:
        """The query of a request; a 400 naming the field for a bad value."""
        status = params.get("status", "").strip() or None
        if status is not None and status not in WORKFLOW_STATES:
            shown = status if status.isprintable() and len(status) <= 40 else status[:40]
            raise HTTPException(
                400,
                f"bad filter: status: {shown!r} is not one of {', '.join(WORKFLOW_STATES)}",
            )
        text = params.get("id", "").strip()
        workflow_id = None
        if text:
            if not is_id(text):
                raise HTTPException(
                    400,
                    f"bad filter: id must be a workflow id (a positive integer), got {text[:40]!r}",
                )
            workflow_id = int(text)
        return cls(status, workflow_id, optional_id(params.get("before"), "before"))

    def filter_query(self) -> dict[str, Any]:
        """The filter without the paging."""
        return {"status": self.status, "id": self.workflow_id}

    def as_query(self) -> dict[str, Any]:
        return {**self.filter_query(), "before": self.before}

    def state_links(self) -> dict[str, str]:
        """The query string of each state tab (the search kept, the paging dropped)."""
        links = {"": query_string({"id": self.workflow_id})}
        for state in WORKFLOW_STATES:
            links[state] = query_string({"status": state, "id": self.workflow_id})
        return links


class WorkflowPages:
    """The workflow pages of one dashboard: what each shows (run in a thread), the pages,
    their live parts and the Cancel workflow action."""

    def __init__(self, dashboard: Dashboard) -> None:
        self.dashboard = dashboard
        self.app = dashboard.app

    # -- what each page shows (run in a thread) --
    def workflows_context(
        self, query: WorkflowQuery, db: DashboardDatabase | None = None
    ) -> dict[str, Any]:
        data = workflows_page(
            self.app,
            db or self.dashboard.db,
            status=query.status,
            workflow_id=query.workflow_id,
            before=query.before,
            limit=WORKFLOWS_PAGE_SIZE,
        )
        older = None
        if data.more and data.workflows:
            older = query_string({**query.filter_query(), "before": data.workflows[-1].id})
        elif data.searched_to is not None:
            older = query_string({**query.filter_query(), "before": data.searched_to})
        return {
            "now": data.now,
            "workflows": data.workflows,
            "total": data.total,
            "running": data.running,
            "count_cap": WORKFLOW_COUNT_CAP,
            "searched_to": data.searched_to,
            "scan_jobs": WORKFLOW_SCAN_JOBS,
            "query": query,
            "query_string": query_string(query.filter_query()),
            "older": older,
            "state_links": query.state_links(),
        }

    def workflow_context(
        self, workflow_id: int, db: DashboardDatabase | None = None
    ) -> dict[str, Any]:
        data = workflow_page(self.app, db or self.dashboard.db, workflow_id)
        steps = data.detail.steps  # in id order, which is step order (see graph.layout)
        return {
            "now": data.now,
            "page": data,
            "summary": data.summary,
            "graph": layout(data.detail.steps, data.now),
            "steps": steps[:STEP_ROWS],
            "more_steps": max(0, len(steps) - STEP_ROWS),
            "incidents": data.detail.incidents,
        }

    # -- pages --
    async def workflows(self, request: Request) -> Response:
        query = WorkflowQuery.from_params(request.query_params)
        dashboard = self.dashboard
        if query.workflow_id is not None:
            there = dashboard.elsewhere(request, query.workflow_id)
            if there is not None:  # a search for another store's id: its dashboard's list
                return RedirectResponse(
                    f"{there}/workflows?{query_string(query.as_query())}", status_code=303
                )
        context = await run_in_threadpool(self.workflows_context, query, dashboard.reads(request))
        return dashboard.page(
            request,
            "workflows.html",
            live=live_url(request, "/workflows", query_string(query.as_query())),
            **context,
        )

    async def workflow(self, request: Request) -> Response:
        workflow_id = workflow_id_or_404(request.path_params["workflow_id"])
        dashboard = self.dashboard
        there = dashboard.elsewhere(request, workflow_id)
        if there is not None:  # the id names another store: its dashboard
            return RedirectResponse(f"{there}/workflows/{workflow_id}", status_code=303)
        try:
            context = await run_in_threadpool(
                self.workflow_context, workflow_id, dashboard.reads(request)
            )
        except WorkflowNotFoundError as error:
            raise HTTPException(404, str(error)) from None
        return dashboard.page(
            request,
            "workflow.html",
            live=live_url(request, f"/workflows/{workflow_id}"),
            message=message(request),
            **context,
        )

    def live_view(
        self, request: Request, base: str, item: str
    ) -> tuple[tuple[Any, ...], Callable[[], str]]:
        """The key and renderer of the live part of the workflows list (``item`` empty)
        or of one workflow's page (``item``: its id)."""
        fragment = self.dashboard.fragment
        if item:
            workflow_id = workflow_id_or_404(item)
            return ("workflow", base, workflow_id), lambda: fragment(
                "_workflow_live.html", base, **self.workflow_context(workflow_id)
            )
        query = WorkflowQuery.from_params(request.query_params)
        return ("workflows", base, query_string(query.as_query())), lambda: fragment(
            "_workflows_live.html", base, **self.workflows_context(query)
        )

    # -- actions --
    async def cancel(self, request: Request) -> Response:
        """Cancel a workflow (``pgtasks workflows cancel``): its waiting and pending jobs
        end cancelled, its running ones are asked to stop."""
        dashboard = self.dashboard
        await dashboard.actions.form(request)
        workflow_id = workflow_id_or_404(request.path_params["workflow_id"])
        try:
            count = await run_in_threadpool(self.app.cancel_workflow, workflow_id)
            if not count:
                found = await run_in_threadpool(
                    lambda: list_workflows(self.app, workflow_id=workflow_id, limit=1)
                )
                state = found[0].state if found else "finished"
                raise HTTPException(
                    409,
                    f"workflow {workflow_id} is {state}: none of its jobs is waiting, pending"
                    " or running, so there is nothing to cancel",
                )
        except WorkflowNotFoundError as error:
            raise HTTPException(404, str(error)) from None
        return dashboard.actions.back(
            request, f"/workflows/{workflow_id}", done="workflow-cancelled", count=count
        )
