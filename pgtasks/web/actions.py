"""The dashboard's actions: every POST (retry, cancel or delete a job, the jobs ticked on
the jobs list or every job a filter matches; pause or resume a queue). Each passes the
read-only and CSRF checks, runs the same functions as the CLI in Starlette's thread pool
and redirects back to the page it came from with ``done=`` (that page reads the primary).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from .._errors import JobNotFoundError, UniqueKeyTakenError, WorkflowProtectedError
from .._job_filter import FILTER_FIELDS
from .._payload import check_name
from .requests import base_path, filter_or_400, form_id, path_id, query_string
from .security import csrf_problem

if TYPE_CHECKING:
    from .app import Dashboard

#: Jobs one "selected" action may name.
MAX_SELECTED = 500


class Actions:
    """The POST routes of one dashboard (``dashboard``: its App, options and secret)."""

    def __init__(self, dashboard: Dashboard) -> None:
        self.dashboard = dashboard
        self.app = dashboard.app

    async def form(self, request: Request) -> list[tuple[str, str]]:
        """The POST's urlencoded form (every field, in order), after the read-only and CSRF
        checks."""
        if self.dashboard.read_only:
            raise HTTPException(403, "this dashboard is read-only")
        body = (await request.body()).decode("utf-8", errors="replace")
        fields = parse_qsl(body, keep_blank_values=True)
        problem = csrf_problem(request, dict(fields), self.dashboard.secret)
        if problem is not None:
            raise HTTPException(403, problem)
        return fields

    def back(self, request: Request, where: str, **params: object) -> Response:
        """Back to the dashboard's page ``where`` (under its mount), ``params`` as its query."""
        query = query_string(params)
        return RedirectResponse(
            f"{base_path(request)}{where}" + (f"?{query}" if query else ""), 303
        )

    async def job(self, request: Request) -> Response:
        """Retry, cancel or delete the job of the path (its page's buttons)."""
        await self.form(request)
        job_id = path_id(request)
        action = request.path_params["action"]
        try:
            if action == "retry":
                result = await run_in_threadpool(self.app.admin.retry_job, job_id)
                if not result.retried:
                    raise HTTPException(409, result.refusal)
                await self.dashboard.controls.audit(request, "retry", [f"job:{job_id}"])
                done = "retried"
            elif action in ("cancel", "terminate"):
                terminate = action == "terminate"
                cancelled = await run_in_threadpool(
                    lambda: self.app.cancel(job_id, terminate=terminate)
                )
                outcome = "terminate-requested" if terminate else cancelled.outcome
                done = {"already_finished": "finished"}.get(cancelled.outcome, outcome)
            else:
                deleted, status = await run_in_threadpool(
                    self.app.admin.delete_finished_job, job_id
                )
                if not deleted:
                    raise HTTPException(
                        409, f"job {job_id} is {status}: only finished jobs can be deleted"
                    )
                return self.back(request, "/jobs", done="deleted")
        except JobNotFoundError as error:
            raise HTTPException(404, str(error)) from None
        except UniqueKeyTakenError as error:  # another job holds its key
            raise HTTPException(409, str(error)) from None
        except WorkflowProtectedError as error:  # it would break an unfinished workflow
            raise HTTPException(409, str(error)) from None
        return self.back(request, f"/jobs/{job_id}", done=done)

    async def selected(self, request: Request) -> Response:
        """Retry, cancel or delete the jobs ticked on the jobs list (each as its own button
        would: the same rules, a job that may not be acted on is counted, not an error)."""
        fields = await self.form(request)
        form = dict(fields)
        action = form.get("action")
        if action in ("run_now", "snooze", "edit"):  # runtime controls (controls.py)
            return await self.dashboard.controls.selected(request, fields, action)
        if action not in ("retry", "cancel", "delete"):
            raise HTTPException(
                400, "choose an action: retry, cancel, delete, run now, snooze or edit"
            )
        ids = sorted({form_id(value) for name, value in fields if name == "id"})
        if not ids:
            raise HTTPException(400, "no job selected: tick the jobs to act on")
        if len(ids) > MAX_SELECTED:
            raise HTTPException(400, f"at most {MAX_SELECTED} jobs at once, got {len(ids)}")
        acted: list[int] = []
        outcome = await run_in_threadpool(self._act_on, action, ids, acted)
        if action == "retry":
            await self.dashboard.controls.audit(request, "retry", [f"job:{i}" for i in acted])
        back = {name: value for name, value in fields if name in FILTER_FIELDS}
        done = {"retry": "selected-retried", "cancel": "selected-cancelled"}.get(
            action, "selected-deleted"
        )
        return self.back(request, "/jobs", **back, done=done, **outcome)

    def _act_on(self, action: str, ids: list[int], acted: list[int]) -> dict[str, int]:
        done = requested = refused = 0
        for job_id in ids:
            try:
                if action == "retry":
                    retried = self.app.admin.retry_job(job_id).retried
                    done, refused = done + retried, refused + (not retried)
                    if retried:
                        acted.append(job_id)
                elif action == "cancel":
                    outcome = self.app.cancel(job_id).outcome
                    done += outcome == "cancelled"
                    requested += outcome == "requested"
                    refused += outcome == "already_finished"
                else:
                    deleted, _ = self.app.admin.delete_finished_job(job_id)
                    done, refused = done + deleted, refused + (not deleted)
            except (JobNotFoundError, UniqueKeyTakenError, WorkflowProtectedError):
                refused += 1
        return {"count": done, "requested": requested, "refused": refused}

    async def queue(self, request: Request) -> Response:
        """Pause or resume the queue the form names."""
        form = dict(await self.form(request))
        try:
            queue = check_name("queue", form.get("queue"))
        except ValueError as error:
            raise HTTPException(400, str(error)) from None
        if request.path_params["action"] == "pause":
            await run_in_threadpool(self.app.pause_queue, queue)
            return self.back(request, "/", done="paused")
        await run_in_threadpool(self.app.resume_queue, queue)
        return self.back(request, "/", done="resumed")

    async def host(self, request: Request) -> Response:
        """Pause or resume the workers of the host the form names (the workers page)."""
        form = dict(await self.form(request))
        try:
            hostname = check_name("hostname", form.get("hostname"))
        except ValueError as error:
            raise HTTPException(400, str(error)) from None
        pause = request.path_params["action"] == "pause"
        await run_in_threadpool(lambda: self.app.admin.pause_host(hostname, pause=pause))
        return self.back(request, "/workers", done="host-paused" if pause else "host-resumed")

    async def bulk(self, request: Request) -> Response:
        """Retry or cancel every job the form's filter matches (never without a filter)."""
        form = dict(await self.form(request))
        job_filter = filter_or_400(form)
        if job_filter.empty:
            raise HTTPException(
                400, "a bulk action needs a filter (e.g. status=failed): refusing every job"
            )
        query = job_filter.as_query()
        if request.path_params["action"] == "run_now":  # runtime controls (controls.py)
            count = await self.dashboard.controls.run_now_matching(request, job_filter)
            return self.back(request, "/jobs", **query, done="bulk-run-now", count=count)
        if request.path_params["action"] == "retry":
            try:
                ids = await run_in_threadpool(self.app.admin.retry_matching, job_filter)
            except (UniqueKeyTakenError, WorkflowProtectedError) as error:
                raise HTTPException(409, str(error)) from None
            target = f"jobs:{query_string(query)}"
            await self.dashboard.controls.audit(request, "retry", [target], {"jobs": len(ids)})
            return self.back(request, "/jobs", **query, done="bulk-retried", count=len(ids))
        outcome = await run_in_threadpool(self.app.admin.cancel_matching, job_filter)
        return self.back(
            request,
            "/jobs",
            **query,
            done="bulk-cancelled",
            count=len(outcome["cancelled"]),
            requested=len(outcome["requested"]),
        )
