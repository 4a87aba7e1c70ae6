"""The dashboard as an ASGI application (Starlette + Jinja2, vendored htmx, server-sent
events): ``asgi(app)`` builds it; ``pgtasks web`` serves it with uvicorn.

Reads go through ``pgtasks._app.admin`` (the queries behind ``pgtasks stats|jobs|
workers|schedules``, plus the dashboard's own in ``sql/web.sql``); writes use the same
functions as the CLI (``app.cancel``, ``admin.retry_job``, …). Database calls are
synchronous and run in Starlette's thread pool.

Pages read from the app's replica when it has one (``replica_dsn``), except the page an
action redirects to (its URL carries ``done=``): that one reads the primary, so the
change just made shows at once.
"""

from __future__ import annotations

import asyncio
import functools
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from .._app import admin
from .._app.schedules import schedule_statuses
from .._errors import JobNotFoundError, PgTasksError, UniqueKeyTakenError
from .._jobs import JobRow
from .._operations import (
    RETRYABLE,
    STATUSES,
    JobFilter,
    Overview,
    format_duration,
    parse_job_filter,
)
from .._payload import check_name
from .live import END, LiveHub
from .security import AuthCallable, credentials, csrf_problem, csrf_token, is_loopback

if TYPE_CHECKING:
    from .._app.app import App

HERE = Path(__file__).resolve().parent
#: Jobs per page of the jobs list.
PAGE_SIZE = 50
#: The largest id PostgreSQL's bigint holds: larger ids are "not found", not a 500.
MAX_ID = 2**63 - 1
#: Content-Security-Policy: only the dashboard's own scripts and styles run.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
    " connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}
#: What an action's redirect reports (``?done=...``): fixed texts, never request input.
MESSAGES = {
    "retried": "Retried: the job is pending and due now.",
    "cancelled": "Cancelled: the job will not run.",
    "requested": "Cancellation requested: its worker stops it and records it as cancelled.",
    "finished": "The job had already finished: nothing to cancel.",
    "deleted": "The job was deleted.",
    "bulk-retried": "Retried {count} job(s).",
    "bulk-cancelled": "Cancelled {count} pending job(s), asked {requested} running job(s) to stop.",
    "paused": "Paused: workers claim none of its jobs from their next poll on.",
    "resumed": "Resumed: its workers were woken.",
}


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["duration"] = format_duration
    env.filters["timestamp"] = _timestamp
    env.filters["pretty_json"] = _pretty_json
    env.filters["number"] = "{:,}".format
    env.globals["ago"] = _ago
    env.globals["STATUSES"] = STATUSES
    return env


def _timestamp(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _ago(now: datetime, value: datetime | None) -> str:
    if value is None:
        return "-"
    delta = (now - value).total_seconds()
    return f"{format_duration(delta)} ago" if delta >= 0 else f"in {format_duration(-delta)}"


def _pretty_json(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def chart(
    per_minute: list[tuple[datetime, int]], width: int = 600, height: int = 80
) -> dict[str, Any]:
    """Bars of an inline SVG chart: one per minute, scaled to the busiest minute."""
    peak = max((count for _, count in per_minute), default=0)
    slot = width / max(1, len(per_minute))
    bars = []
    for index, (minute, count) in enumerate(per_minute):
        bar_height = 0.0 if peak == 0 else max(1.0, (height - 2) * count / peak)
        bars.append(
            {
                "x": round(index * slot + 1, 1),
                "y": round(height - bar_height, 1),
                "width": round(max(1.0, slot - 2), 1),
                "height": round(bar_height, 1),
                "label": f"{_timestamp(minute)[11:16]} UTC: {count} finished",
            }
        )
    total = sum(count for _, count in per_minute)
    return {"width": width, "height": height, "bars": bars, "peak": peak, "total": total}


class Dashboard:
    """The routes of one dashboard over one App."""

    def __init__(
        self,
        app: App,
        *,
        auth: AuthCallable | None,
        read_only: bool,
        insecure_no_auth: bool,
        secret: bytes,
        debounce: float,
        poll: float,
    ) -> None:
        self.app = app
        self.auth = auth
        self.read_only = read_only
        self.insecure_no_auth = insecure_no_auth
        self.secret = secret
        self.csrf = csrf_token(secret)
        self.templates = _environment()
        self.live = LiveHub(app, self.render_live, debounce=debounce, poll=poll)
        #: The path the dashboard is mounted at ("" at the root), from the last request.
        self.base = ""

    # -- rendering --
    def page(
        self, request: Request, template: str, status_code: int = 200, **context: Any
    ) -> HTMLResponse:
        base = self.base = request.scope.get("root_path", "")
        html = self.templates.get_template(template).render(
            base=base,
            path=request.url.path[len(base) :] or "/",
            read_only=self.read_only,
            csrf=self.csrf,
            database=self.app.describe_database(),
            schema=self.app.schema,
            **context,
        )
        return HTMLResponse(html, status_code=status_code)

    def render_live(self) -> str:
        """The overview's live part, as the event stream sends it (runs in a thread)."""
        data = admin.overview(self.app, replica=True)
        return self.templates.get_template("_overview_live.html").render(
            base=self.base,
            schema=self.app.schema,
            read_only=self.read_only,
            csrf=self.csrf,
            **self._overview_context(data),
        )

    @staticmethod
    def _overview_context(data: Overview) -> dict[str, Any]:
        return {"overview": data, "now": data.now, "chart": chart(data.per_minute)}

    # -- pages --
    async def overview(self, request: Request) -> Response:
        data = await run_in_threadpool(
            functools.partial(admin.overview, self.app, replica=_replica(request))
        )
        return self.page(
            request, "overview.html", message=_message(request), **self._overview_context(data)
        )

    async def events(self, request: Request) -> Response:
        # Links in the pushed HTML follow the mount point (one per Dashboard).
        self.base = request.scope.get("root_path", "")
        queue = self.live.subscribe()

        async def stream() -> AsyncIterator[str]:
            try:
                yield "retry: 3000\n\n"
                while True:
                    try:
                        html = await asyncio.wait_for(queue.get(), 15.0)
                    except asyncio.TimeoutError:
                        yield ": keep-alive\n\n"  # finds a closed connection
                        continue
                    if html == END:  # the server is stopping
                        return
                    data = "".join(f"data: {line}\n" for line in html.splitlines())
                    yield f"event: overview\n{data}\n"
            finally:
                self.live.unsubscribe(queue)

        headers = {"x-accel-buffering": "no"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    async def jobs(self, request: Request) -> Response:
        job_filter = _filter_or_400(dict(request.query_params))
        before = _optional_id(request.query_params.get("before"), "before")
        now, rows, more = await run_in_threadpool(
            functools.partial(
                admin.jobs_page,
                self.app,
                job_filter,
                before=before,
                limit=PAGE_SIZE,
                replica=_replica(request),
            )
        )
        query = job_filter.as_query()
        older = None
        if more and rows:
            older = urlencode({**query, "before": rows[-1].id})
        message = _message(request)
        return self.page(
            request,
            "jobs.html",
            now=now,
            jobs=rows,
            filter=job_filter,
            query=query,
            query_string=urlencode(query),
            older=older,
            paged=before is not None,
            message=message,
            tasks=sorted(self.app.tasks),
        )

    async def job(self, request: Request) -> Response:
        job_id = _path_id(request)
        try:
            now, job = await run_in_threadpool(
                functools.partial(admin.job_detail, self.app, job_id, replica=_replica(request))
            )
        except JobNotFoundError as error:
            raise HTTPException(404, str(error)) from None
        return self.page(
            request,
            "job.html",
            now=now,
            job=job,
            timeline=_timeline(job),
            retryable=job.status.value in RETRYABLE,
            message=_message(request),
        )

    async def workers(self, request: Request) -> Response:
        def read() -> Any:
            return self.app.database.read(
                lambda conn: admin.read_workers(self.app, conn, since=admin.WORKER_HISTORY)
            )

        now, infos = await run_in_threadpool(read)
        return self.page(
            request, "workers.html", now=now, workers=infos, lease=self.app.lease_timeout
        )

    async def schedules(self, request: Request) -> Response:
        now, statuses = await run_in_threadpool(
            functools.partial(schedule_statuses, self.app, replica=True)
        )
        return self.page(request, "schedules.html", now=now, schedules=statuses)

    # -- actions --
    async def _form(self, request: Request) -> dict[str, str]:
        """The POST's urlencoded form, after the read-only and CSRF checks."""
        if self.read_only:
            raise HTTPException(403, "this dashboard is read-only")
        body = (await request.body()).decode("utf-8", errors="replace")
        form = dict(parse_qsl(body, keep_blank_values=True))
        problem = csrf_problem(request, form, self.secret)
        if problem is not None:
            raise HTTPException(403, problem)
        return form

    def _back(self, request: Request, where: str, **params: object) -> Response:
        base = request.scope.get("root_path", "")
        query = urlencode({name: value for name, value in params.items() if value is not None})
        return RedirectResponse(f"{base}{where}" + (f"?{query}" if query else ""), 303)

    async def job_action(self, request: Request) -> Response:
        await self._form(request)
        job_id = _path_id(request)
        action = request.path_params["action"]
        try:
            if action == "retry":
                result = await run_in_threadpool(admin.retry_job, self.app, job_id)
                if not result.retried:
                    raise HTTPException(409, result.refusal)
                done = "retried"
            elif action == "cancel":
                outcome = (await run_in_threadpool(self.app.cancel, job_id)).outcome
                done = {"already_finished": "finished"}.get(outcome, outcome)
            else:
                deleted, status = await run_in_threadpool(
                    admin.delete_finished_job, self.app, job_id
                )
                if not deleted:
                    raise HTTPException(
                        409, f"job {job_id} is {status}: only finished jobs can be deleted"
                    )
                return self._back(request, "/jobs", done="deleted")
        except JobNotFoundError as error:
            raise HTTPException(404, str(error)) from None
        except UniqueKeyTakenError as error:  # another job holds its key (migration 0010)
            raise HTTPException(409, str(error)) from None
        return self._back(request, f"/jobs/{job_id}", done=done)

    async def queue_action(self, request: Request) -> Response:
        """Pause or resume the queue the form names (migration 0007)."""
        form = await self._form(request)
        try:
            queue = check_name("queue", form.get("queue"))
        except ValueError as error:
            raise HTTPException(400, str(error)) from None
        if request.path_params["action"] == "pause":
            await run_in_threadpool(self.app.pause_queue, queue)
            return self._back(request, "/", done="paused")
        await run_in_threadpool(self.app.resume_queue, queue)
        return self._back(request, "/", done="resumed")

    async def bulk_action(self, request: Request) -> Response:
        form = await self._form(request)
        job_filter = _filter_or_400(form)
        if job_filter.empty:
            raise HTTPException(
                400, "a bulk action needs a filter (e.g. status=failed): refusing every job"
            )
        query = job_filter.as_query()
        if request.path_params["action"] == "retry":
            try:
                ids = await run_in_threadpool(admin.retry_matching, self.app, job_filter)
            except UniqueKeyTakenError as error:
                raise HTTPException(409, str(error)) from None
            return self._back(request, "/jobs", **query, done="bulk-retried", count=len(ids))
        outcome = await run_in_threadpool(admin.cancel_matching, self.app, job_filter)
        return self._back(
            request,
            "/jobs",
            **query,
            done="bulk-cancelled",
            count=len(outcome["cancelled"]),
            requested=len(outcome["requested"]),
        )


# -- request helpers ------------------------------------------------------------------------------
def _filter_or_400(params: Mapping[str, str]) -> JobFilter:
    try:
        return parse_job_filter(params)
    except ValueError as error:
        raise HTTPException(400, f"bad filter: {error}") from None


def _optional_id(text: str | None, name: str) -> int | None:
    if text is None or text == "":
        return None
    if not text.isdigit() or int(text) > MAX_ID:
        raise HTTPException(400, f"{name} must be a job id (a positive integer), got {text!r}")
    return int(text)


def _path_id(request: Request) -> int:
    text = request.path_params["job_id"]
    if not text.isdigit() or int(text) > MAX_ID:
        raise HTTPException(404, f"no job {text!r}: job ids are positive integers")
    return int(text)


def _replica(request: Request) -> bool:
    """Whether a page may read the replica: not right after an action (``done=``), which
    must show the change it made."""
    return "done" not in request.query_params


def _message(request: Request) -> str | None:
    done = request.query_params.get("done")
    template = MESSAGES.get(done or "")
    if template is None:
        return None

    def number(name: str) -> int:
        text = request.query_params.get(name, "0")
        return int(text) if text.isdigit() else 0

    return template.format(count=number("count"), requested=number("requested"))


def _timeline(job: JobRow) -> list[tuple[str, datetime | None]]:
    return [
        ("created", job.created_at),
        ("run at", job.run_at),
        ("first started", job.started_at),
        ("started (locked at)", job.locked_at),
        ("finished", job.finished_at),
        ("updated", job.updated_at),
    ]


# -- errors and security --------------------------------------------------------------------------
def _error_page(dashboard: Dashboard) -> Callable[[Request, Exception], Awaitable[Response]]:
    async def handle(request: Request, error: Exception) -> Response:
        if isinstance(error, HTTPException):
            status, detail = error.status_code, error.detail
        elif isinstance(error, PgTasksError):
            # The database is down, the schema not migrated, the pool exhausted: say so.
            status, detail = 503, str(error)
        else:  # pragma: no cover - Starlette routes only the two kinds above here
            raise error
        return dashboard.page(
            request, "error.html", status_code=status, status=status, detail=detail
        )

    return handle


class DashboardApp:
    """The dashboard's ASGI application: authentication, then the routes, with security
    headers on every response. ``dashboard`` holds its state (the App, the live hub).
    """

    def __init__(self, inner: ASGIApp, dashboard: Dashboard) -> None:
        self.inner = inner
        self.dashboard = dashboard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        refusal = self._refusal(Request(scope))
        if refusal is not None:
            await refusal(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [
                    (name.encode(), value.encode())
                    for name, value in SECURITY_HEADERS.items()
                    if name.encode() not in present
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self.inner(scope, receive, send_with_headers)

    def close_streams(self) -> None:
        """End the open event streams (call when the server stops; safe from a signal handler)."""
        self.dashboard.live.close_streams()

    def _refusal(self, request: Request) -> Response | None:
        dashboard = self.dashboard
        if dashboard.auth is not None:
            given = credentials(request)
            if given is not None and dashboard.auth(*given):
                return None
            return Response(
                "authentication required\n",
                401,
                headers={"www-authenticate": 'Basic realm="pgtasks", charset="UTF-8"'},
                media_type="text/plain",
            )
        client = request.client.host if request.client else None
        if dashboard.insecure_no_auth or is_loopback(client):
            return None
        return Response(
            "pgtasks web: no authentication is configured, so only loopback clients are"
            " served. Set PGTASKS_WEB_USER and PGTASKS_WEB_PASSWORD (pgtasks web) or pass"
            " auth= to pgtasks.web.asgi().\n",
            401,
            media_type="text/plain",
        )


def asgi(
    app: App,
    *,
    auth: AuthCallable | None = None,
    read_only: bool = False,
    insecure_no_auth: bool = False,
    secret: bytes | None = None,
    debounce: float = 0.5,
    poll: float = 5.0,
) -> DashboardApp:
    """The dashboard of ``app`` as an ASGI application, to serve or mount.

    ``auth(user, password) -> bool`` checks HTTP basic credentials on every request
    (``pgtasks.web.basic_auth(user, password)`` builds one); without it only loopback
    clients are served, unless ``insecure_no_auth``. ``read_only`` hides every action and
    refuses its POST (403). ``secret`` keys the CSRF token (random per process when
    omitted). ``debounce`` / ``poll``: the live overview's shortest and longest gaps
    between two refreshes, in seconds.
    """
    dashboard = Dashboard(
        app,
        auth=auth,
        read_only=read_only,
        insecure_no_auth=insecure_no_auth,
        secret=secret if secret is not None else secrets.token_bytes(32),
        debounce=debounce,
        poll=poll,
    )
    routes = [
        Route("/", dashboard.overview, name="overview"),
        Route("/events", dashboard.events, name="events"),
        Route("/jobs", dashboard.jobs, name="jobs"),
        Route(
            "/jobs/bulk/{action:str}",
            _only(("retry", "cancel"), dashboard.bulk_action),
            methods=["POST"],
        ),
        Route("/jobs/{job_id:str}", dashboard.job, name="job"),
        Route(
            "/jobs/{job_id:str}/{action:str}",
            _only(("retry", "cancel", "delete"), dashboard.job_action),
            methods=["POST"],
        ),
        Route(
            "/queues/{action:str}",
            _only(("pause", "resume"), dashboard.queue_action),
            methods=["POST"],
        ),
        Route("/workers", dashboard.workers, name="workers"),
        Route("/schedules", dashboard.schedules, name="schedules"),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    handler = _error_page(dashboard)
    starlette = Starlette(
        routes=routes,
        exception_handlers={HTTPException: handler, PgTasksError: handler},
    )
    starlette.state.dashboard = dashboard
    return DashboardApp(starlette, dashboard)


def _only(
    actions: tuple[str, ...], endpoint: Callable[[Request], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    async def guarded(request: Request) -> Response:
        if request.path_params["action"] not in actions:
            raise HTTPException(404, f"no such action: {request.path_params['action']!r}")
        return await endpoint(request)

    return guarded
