"""The dashboard's runtime controls (docs/howto/dashboard.md): change, pause, resume or
reset a limit (the limits page, and the queues of the overview through it); run a pending
job now, snooze it, edit its arguments (its page); run now, snooze or edit the arguments
of the jobs ticked on the jobs list. Each POST passes the read-only and CSRF checks of
Actions.form, runs the functions the CLI runs (``_app/controls.py``: audited, race-safe
against claims) in Starlette's thread pool, and redirects back with ``done=``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from .._app import controls, pending_jobs
from .._app.bulk_edits import edit_arguments_many
from .._errors import (
    JobNotFoundError,
    JobNotPendingError,
    LimitChangeError,
    LimitKeyError,
    PayloadError,
    PoolChangeError,
)
from .._job_filter import FILTER_FIELDS, JobFilter
from .requests import form_id, is_id, path_id
from .security import credentials

if TYPE_CHECKING:
    from .._store.ports import DashboardPort
    from .app import Dashboard

#: The snoozes the job page and the jobs list offer (seconds).
SNOOZES = {"300": "5 minutes", "3600": "1 hour", "86400": "1 day"}
#: The longest arguments text the edit form takes (the payload limit checks the rest).
MAX_EDIT_CHARS = 4_000_000
#: Jobs one "selected" action may name (as Actions).
MAX_SELECTED = 500
#: Limit changes listed under the limits page.
AUDIT_ROWS = 20


def actor(request: Request, dashboard: Dashboard) -> str:
    """Who acts: ``dashboard:<user>@<client address>`` (the basic-auth user, when the
    dashboard has ``auth``)."""
    user = "anonymous"
    if dashboard.auth is not None:
        found = credentials(request)
        if found is not None:
            user = found[0][:100]
    client = request.client.host if request.client is not None else "?"
    return f"dashboard:{user}@{client}"


def _seconds(form: dict[str, str]) -> float:
    text = form.get("seconds", "").strip()
    if text not in SNOOZES:
        raise HTTPException(400, f"snooze: choose one of {', '.join(SNOOZES.values())}")
    return float(text)


def _json_field(form: dict[str, str], name: str, kind: type, default: str) -> Any:
    text = form.get(name, "").strip() or default
    if len(text) > MAX_EDIT_CHARS:
        raise HTTPException(400, f"{name}: at most {MAX_EDIT_CHARS} characters")
    try:
        value = json.loads(text)
    except ValueError as error:
        raise HTTPException(400, f"{name} is not JSON: {error}") from None
    if not isinstance(value, kind):
        shape = "an array, e.g. [1, 2]" if kind is list else 'an object, e.g. {"to": "a@b"}'
        raise HTTPException(400, f"{name} must be {shape}")
    return value


class ControlActions:
    """The runtime controls' POST routes of one dashboard."""

    def __init__(self, dashboard: Dashboard) -> None:
        self.dashboard = dashboard
        self.app = dashboard.app

    async def limit(self, request: Request) -> Response:
        """Set (concurrency and/or rate), pause, resume or reset the limit the form names."""
        actions = self.dashboard.actions
        form = dict(await actions.form(request))
        name = form.get("name", "").strip()
        operation = request.path_params["action"]
        who = actor(request, self.dashboard)
        try:
            if operation == "set":
                concurrency = form.get("concurrency", "").strip()
                rate = form.get("rate", "").strip()
                change = await run_in_threadpool(
                    lambda: controls.set_limit(
                        self.app,
                        name,
                        concurrency=concurrency if concurrency else controls.UNSET,
                        rate=rate if rate else controls.UNSET,
                        actor=who,
                    )
                )
            else:
                function = {
                    "pause": controls.pause_limit,
                    "resume": controls.resume_limit,
                    "reset": controls.reset_limit,
                }[operation]
                change = await run_in_threadpool(lambda: function(self.app, name, actor=who))
        except LimitChangeError as error:
            raise HTTPException(400, str(error)) from None
        return actions.back(request, "/limits", name=change.name, done=f"limit-{operation}")

    async def job(self, request: Request) -> Response:
        """Run now, snooze or edit the arguments of the job of the path (its page)."""
        actions = self.dashboard.actions
        form = dict(await actions.form(request))
        job_id = path_id(request)
        operation = request.path_params["action"]
        who = actor(request, self.dashboard)
        if operation == "edit":
            args = _json_field(form, "args", list, "[]")
            kwargs = _json_field(form, "kwargs", dict, "{}")
            try:
                await run_in_threadpool(
                    lambda: pending_jobs.edit_arguments(self.app, job_id, args, kwargs, actor=who)
                )
            except JobNotFoundError as error:
                raise HTTPException(404, str(error)) from None
            except JobNotPendingError as error:
                raise HTTPException(409, str(error)) from None
            except (PayloadError, LimitKeyError, TypeError, ValueError) as error:
                raise HTTPException(400, f"arguments refused: {error}") from None
            return actions.back(request, f"/jobs/{job_id}", done="edited")
        outcome = await run_in_threadpool(self._act, operation, [job_id], form, who)
        if not outcome.done:
            raise HTTPException(
                409,
                f"job {job_id} is not a pending job"
                + (" scheduled later" if operation == "run_now" else "")
                + " (it may have started meanwhile): nothing was changed",
            )
        return actions.back(request, f"/jobs/{job_id}", done=operation.replace("_", "-"))

    async def pool(self, request: Request) -> Response:
        """Grow or shrink a live worker's pool by one slot (the workers page), within the
        bounds it started with; the worker applies it at its next heartbeat."""
        actions = self.dashboard.actions
        await actions.form(request)
        text = request.path_params["worker_id"]
        if not is_id(text):
            raise HTTPException(404, f"no worker {text[:40]!r}: worker ids are positive integers")
        delta = 1 if request.path_params["action"] == "pool_grow" else -1
        who = actor(request, self.dashboard)
        try:
            await run_in_threadpool(
                lambda: controls.resize_pool(self.app, int(text), delta, actor=who, wait=0)
            )
        except PoolChangeError as error:
            raise HTTPException(409, str(error)) from None
        return actions.back(request, "/workers", done="pool-resized")

    async def audit(
        self, request: Request, action: str, targets: list[str], after: Any = None
    ) -> None:
        """Record an action of the older buttons (retry) in the audit log, one row per
        target (a job, or ``jobs:<filter>`` for a bulk action)."""
        who = actor(request, self.dashboard)
        queries: DashboardPort = self.app.queries

        def write(conn: Any) -> None:
            with conn.transaction():
                for target in targets:
                    queries.insert_audit(
                        conn, actor=who, action=action, target=target, before=None, after=after
                    )

        if targets:
            await run_in_threadpool(self.app.database.run, write)

    async def run_now_matching(self, request: Request, job_filter: JobFilter) -> int:
        """Make every pending job scheduled later that the filter matches due now."""
        who = actor(request, self.dashboard)
        return await run_in_threadpool(
            lambda: pending_jobs.run_now_matching(self.app, job_filter, actor=who)
        )

    def _act(
        self, operation: str, ids: list[int], form: dict[str, str], who: str
    ) -> pending_jobs.JobsAction:
        if operation == "run_now":
            return pending_jobs.run_now(self.app, ids, actor=who)
        if operation == "edit":
            args = _json_field(form, "edit_args", list, "[]")
            kwargs = _json_field(form, "edit_kwargs", dict, "{}")
            try:
                return edit_arguments_many(self.app, ids, args, kwargs, actor=who)
            except (PayloadError, LimitKeyError, TypeError, ValueError) as error:
                raise HTTPException(400, f"arguments refused: {error}") from None
        return pending_jobs.snooze(self.app, ids, _seconds(form), actor=who)

    async def selected(
        self, request: Request, fields: list[tuple[str, str]], operation: str
    ) -> Response:
        """Run now, snooze or edit the arguments of the jobs ticked on the jobs list (the
        others are counted)."""
        form = dict(fields)
        ids = sorted({form_id(value) for name, value in fields if name == "id"})
        if not ids:
            raise HTTPException(400, "no job selected: tick the jobs to act on")
        if len(ids) > MAX_SELECTED:
            raise HTTPException(400, f"at most {MAX_SELECTED} jobs at once, got {len(ids)}")
        who = actor(request, self.dashboard)
        outcome = await run_in_threadpool(self._act, operation, ids, form, who)
        back = {name: value for name, value in fields if name in FILTER_FIELDS}
        return self.dashboard.actions.back(
            request,
            "/jobs",
            **back,
            done=f"selected-{operation.replace('_', '-')}",
            count=len(outcome.done),
            refused=len(outcome.refused),
        )


def audit_rows(dashboard: Dashboard, name: str | None) -> list[dict[str, Any]]:
    """The last limit changes (of ``name`` when given), newest first, for the page."""
    db = dashboard.db.on_primary()
    rows = db.run(
        lambda conn: db.queries.get_audit(
            conn,
            targets=[f"limit:{name}"] if name else None,
            prefix=None if name else "limit:",
            limit=AUDIT_ROWS,
        )
    )
    return [
        {
            **row,
            "limit": row["target"].removeprefix("limit:"),
            "before_text": controls.describe_values(row["before"]),
            "after_text": controls.describe_values(row["after"]),
        }
        for row in rows
    ]
