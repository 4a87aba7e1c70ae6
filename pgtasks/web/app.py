"""The dashboard as an ASGI application (Starlette + Jinja2, vendored htmx, server-sent
events): ``asgi(app)`` builds it; ``pgtasks web`` serves it with uvicorn.

Reads are the dashboard's own (``pgtasks.web.reads``, queries in ``sql/web.sql``) on a
small pool of its own with a statement timeout; writes use the same functions as the CLI
(``app.cancel``, ``admin.retry_job``, …). Database calls are synchronous and run in
Starlette's thread pool. Pages with a live part (overview, jobs, a job, workers) render
it with the same template the event stream pushes.

Pages read from the app's replica when it has one (``replica_dsn``), except the page an
action redirects to (its URL carries ``done=``): that one reads the primary, so the
change just made shows at once.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode

import psycopg
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._app import admin
from .._app.layout import DEFAULT_STORE
from .._errors import (
    JobNotFoundError,
    PgTasksError,
    UniqueKeyTakenError,
    WorkflowProtectedError,
)
from .._job_filter import FILTER_FIELDS, JobFilter, parse_job_filter
from .._jobs import JobRow
from .._operations import RETRYABLE, STATUSES, format_duration
from .._payload import check_name
from .charts import charts
from .live import END, LiveHub
from .reads import (
    SCAN_ROWS,
    DashboardDatabase,
    FinishedMinutes,
    format_bytes,
)
from .reads import (
    bulk_counts as read_bulk_counts,
)
from .reads import (
    job_page as read_job_page,
)
from .reads import (
    jobs_page as read_jobs_page,
)
from .reads import (
    overview as read_overview,
)
from .reads import (
    schedules as read_schedules,
)
from .reads import (
    workers as read_workers,
)
from .security import (
    AuthCallable,
    FailedLogins,
    credentials,
    csrf_problem,
    csrf_token,
    forwarding_header,
    host_matches,
    host_name,
    is_loopback,
    is_loopback_host,
)
from .stores import job_elsewhere, mount_stores, store_links, store_names

if TYPE_CHECKING:
    from .._app.app import App

HERE = Path(__file__).resolve().parent
#: Jobs per page of the jobs list.
PAGE_SIZE = 50
#: Jobs one "selected" action may name.
MAX_SELECTED = 500
#: The largest id PostgreSQL's bigint holds: larger ids are "not found", not a 500.
MAX_ID = 2**63 - 1
#: Seconds the overview's charts are reused (they count per minute; each read fetches a
#: row per job finished in the hour).
CHART_MAX_AGE = 10.0
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
    "cross-origin-resource-policy": "same-origin",
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
    "selected-retried": "Retried {count} selected job(s); {refused} could not be retried.",
    "selected-cancelled": (
        "Cancelled {count} selected job(s), asked {requested} running job(s) to stop;"
        " {refused} had already finished."
    ),
    "selected-deleted": "Deleted {count} selected job(s); {refused} could not be deleted.",
    "paused": "Paused: workers claim none of its jobs from their next poll on.",
    "resumed": "Resumed: its workers were woken.",
}
#: Which job statuses a page about the jobs list links to, in life-cycle order.
TAB_STATUSES = STATUSES


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["duration"] = format_duration
    env.filters["timestamp"] = _timestamp
    env.filters["isoformat"] = _isoformat
    env.filters["number"] = "{:,}".format
    env.filters["bytes"] = format_bytes
    env.globals["ago"] = _ago
    env.globals["STATUSES"] = STATUSES
    env.globals["TAB_STATUSES"] = TAB_STATUSES
    return env


def _timestamp(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _isoformat(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(timezone.utc).isoformat()


def _ago(now: datetime, value: datetime | None) -> str:
    if value is None:
        return "-"
    delta = (now - value).total_seconds()
    return f"{format_duration(delta)} ago" if delta >= 0 else f"in {format_duration(-delta)}"


def _query(params: Mapping[str, object]) -> str:
    """A query string of the non-empty values, in order (for links and event streams)."""
    return urlencode({name: value for name, value in params.items() if value not in (None, "")})


class Dashboard:
    """The routes of one dashboard over one App."""

    def __init__(
        self,
        app: App,
        *,
        auth: AuthCallable | None,
        read_only: bool,
        insecure_no_auth: bool,
        allowed_hosts: Sequence[str] | None,
        secret: bytes,
        debounce: float,
        poll: float,
        pool_size: int,
        statement_timeout: float,
        stream_max_age: float,
        login_attempts: int,
    ) -> None:
        self.app = app
        self.auth = auth
        self.read_only = read_only
        self.insecure_no_auth = insecure_no_auth
        self.allowed_hosts = tuple(allowed_hosts) if allowed_hosts is not None else None
        self.secret = secret
        self.csrf = csrf_token(secret)
        self.templates = _environment()
        self.db = DashboardDatabase(app, pool_size=pool_size, statement_timeout=statement_timeout)
        self.live = LiveHub(app, debounce=debounce, poll=poll)
        self.stream_max_age = stream_max_age
        self.failed_logins = FailedLogins(limit=login_attempts)
        self._chart: tuple[float, FinishedMinutes] | None = None
        #: Where this store's dashboard is mounted in the dashboard of an app of several
        #: stores ("/stores/<name>"; "" for the default store's, at the root).
        self.mount = ""
        #: The other stores' dashboards, mounted in this one (the root's): closed with it.
        self.mounted: list[DashboardApp] = []

    # -- rendering --
    def _common(self, base: str) -> dict[str, Any]:
        return {
            "base": base,
            "read_only": self.read_only,
            "csrf": self.csrf,
            "schema": self.app.schema,
            **store_links(self.app, base, self.mount),
        }

    def fragment(self, template: str, base: str, **context: Any) -> str:
        return self.templates.get_template(template).render(**self._common(base), **context)

    def page(
        self, request: Request, template: str, status_code: int = 200, **context: Any
    ) -> HTMLResponse:
        base = _base(request)
        html = self.templates.get_template(template).render(
            **self._common(base),
            path=_route_path(request),
            database=self.app.describe_database(),
            **context,
        )
        return HTMLResponse(html, status_code=status_code)

    def reads(self, request: Request) -> DashboardDatabase:
        """Where a page reads: the replica when the app has one, except right after an
        action (``done=``), whose page must show the change it made (the primary)."""
        return self.db.on_primary() if "done" in request.query_params else self.db

    # -- what each page shows (run in a thread) --
    def overview_context(self, db: DashboardDatabase | None = None) -> dict[str, Any]:
        cached = self._chart
        fresh = cached is not None and time.monotonic() - cached[0] < CHART_MAX_AGE
        data = read_overview(
            self.app, db or self.db, finished=cached[1] if fresh and cached else None
        )
        if not fresh:
            self._chart = (time.monotonic(), data.finished)
        return {"overview": data, "now": data.now, "charts": charts(data.finished)}

    def jobs_context(
        self, job_filter: JobFilter, before: int | None, db: DashboardDatabase | None = None
    ) -> dict[str, Any]:
        data = read_jobs_page(db or self.db, job_filter, before=before, limit=PAGE_SIZE)
        query = job_filter.as_query()
        older = None
        if data.more and data.jobs:
            older = _query({**query, "before": data.jobs[-1].id})
        elif data.searched_to is not None:  # not a full page: the scan stopped there
            older = _query({**query, "before": data.searched_to})
        counts = data.counts
        return {
            "now": data.now,
            "jobs": data.jobs,
            "filter": job_filter,
            "query": query,
            "query_string": _query(query),
            "older": older,
            "paged": before is not None,
            "searched_to": data.searched_to,
            "scan_rows": SCAN_ROWS,
            "counts": counts,
            "tab_counts": counts.of(job_filter.queue)
            if counts is not None and job_filter.counted_by_status
            else None,
            "tab_links": _tab_links(job_filter),
        }

    def job_context(self, job_id: int, db: DashboardDatabase | None = None) -> dict[str, Any]:
        data = read_job_page(db or self.db, job_id)
        job = data.job
        return {
            "now": data.now,
            "page": data,
            "job": job,
            "timeline": _timeline(job),
            "retryable": job.status.value in RETRYABLE,
        }

    def workers_context(self, db: DashboardDatabase | None = None) -> dict[str, Any]:
        now, infos = read_workers(self.app, db or self.db)
        return {"now": now, "workers": infos, "lease": self.app.lease_timeout}

    # -- pages --
    async def overview(self, request: Request) -> Response:
        context = await run_in_threadpool(self.overview_context, self.reads(request))
        return self.page(
            request,
            "overview.html",
            live=_live_url(request, "/"),
            message=_message(request),
            **context,
        )

    async def jobs(self, request: Request) -> Response:
        job_filter = _filter_or_400(request.query_params)
        before = _optional_id(request.query_params.get("before"), "before")
        context = await run_in_threadpool(
            self.jobs_context, job_filter, before, self.reads(request)
        )
        return self.page(
            request,
            "jobs.html",
            live=_live_url(request, "/jobs", _query({**context["query"], "before": before})),
            counts_url=f"{_base(request)}/jobs/counts?{context['query_string']}"
            if not job_filter.empty
            else None,
            message=_message(request),
            tasks=sorted(self.app.tasks),
            **context,
        )

    async def job_counts(self, request: Request) -> Response:
        """How many jobs each bulk action of the filter would touch (the buttons say it)."""
        job_filter = _filter_or_400(request.query_params)
        counts = await run_in_threadpool(read_bulk_counts, self.db, job_filter)
        return JSONResponse(counts.as_json())

    async def job(self, request: Request) -> Response:
        job_id = _path_id(request)
        elsewhere = job_elsewhere(self.app, job_id, _base(request), self.mount)
        if elsewhere is not None:  # the id names another store: its dashboard
            return RedirectResponse(elsewhere, status_code=303)
        try:
            context = await run_in_threadpool(self.job_context, job_id, self.reads(request))
        except JobNotFoundError as error:
            raise HTTPException(404, str(error)) from None
        return self.page(
            request,
            "job.html",
            live=_live_url(request, f"/jobs/{job_id}"),
            message=_message(request),
            **context,
        )

    async def workers(self, request: Request) -> Response:
        context = await run_in_threadpool(self.workers_context, self.reads(request))
        return self.page(request, "workers.html", live=_live_url(request, "/workers"), **context)

    async def schedules(self, request: Request) -> Response:
        now, statuses = await run_in_threadpool(read_schedules, self.app, self.reads(request))
        return self.page(request, "schedules.html", now=now, schedules=statuses)

    async def favicon(self, request: Request) -> Response:
        return FileResponse(HERE / "static" / "favicon.ico", media_type="image/x-icon")

    # -- live updates --
    async def events(self, request: Request) -> Response:
        """The event stream of one page's live part: ``/events`` (the overview),
        ``/events/jobs?FILTER``, ``/events/jobs/ID`` or ``/events/workers``."""
        base = _base(request)
        page = "/" + request.path_params.get("page", "")
        key: tuple[Any, ...]
        render: Callable[[], str]
        if page == "/":
            key = ("overview", base)

            def render() -> str:
                return self.fragment("_overview_live.html", base, **self.overview_context())

        elif page == "/jobs":
            job_filter = _filter_or_400(request.query_params)
            before = _optional_id(request.query_params.get("before"), "before")
            key = ("jobs", base, _query({**job_filter.as_query(), "before": before}))

            def render() -> str:
                context = self.jobs_context(job_filter, before)
                return self.fragment("_jobs_live.html", base, **context)

        elif page == "/workers":
            key = ("workers", base)

            def render() -> str:
                return self.fragment("_workers_live.html", base, **self.workers_context())

        elif page.startswith("/jobs/") and page.count("/") == 2:
            job_id = _id_or_404(page.rsplit("/", 1)[1])
            key = ("job", base, job_id)

            def render() -> str:
                return self.fragment("_job_live.html", base, **self.job_context(job_id))

        else:
            raise HTTPException(404, f"no live page {page!r}")
        return self._stream(key, render)

    def _stream(self, key: tuple[Any, ...], render: Callable[[], str]) -> Response:
        hub, max_age = self.live, self.stream_max_age

        async def stream() -> AsyncIterator[str]:
            if hub.closing:  # the server is stopping: no new stream
                yield "retry: 1000\n\n"
                return
            loop = asyncio.get_running_loop()
            deadline = loop.time() + max_age
            # Subscribed before anything is sent: a client that has read the first line is
            # one close_streams() ends.
            subscriber = hub.subscribe(key, render)
            try:
                # Reconnect a second after the stream ends (its age, a server restart).
                yield "retry: 1000\n\n"
                while True:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        return
                    try:
                        html = await asyncio.wait_for(subscriber.get(), min(15.0, remaining))
                    except asyncio.TimeoutError:
                        yield ": keep-alive\n\n"  # finds a closed connection
                        continue
                    if html == END:  # the server is stopping
                        return
                    data = "".join(f"data: {line}\n" for line in html.splitlines())
                    yield f"event: update\n{data}\n"
            finally:
                hub.unsubscribe(subscriber)

        headers = {"x-accel-buffering": "no"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    # -- actions --
    async def _form(self, request: Request) -> list[tuple[str, str]]:
        """The POST's urlencoded form (every field, in order), after the read-only and CSRF
        checks."""
        if self.read_only:
            raise HTTPException(403, "this dashboard is read-only")
        body = (await request.body()).decode("utf-8", errors="replace")
        fields = parse_qsl(body, keep_blank_values=True)
        problem = csrf_problem(request, dict(fields), self.secret)
        if problem is not None:
            raise HTTPException(403, problem)
        return fields

    def _back(self, request: Request, where: str, **params: object) -> Response:
        query = _query(params)
        return RedirectResponse(f"{_base(request)}{where}" + (f"?{query}" if query else ""), 303)

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
        except WorkflowProtectedError as error:  # it would break an unfinished workflow
            raise HTTPException(409, str(error)) from None
        return self._back(request, f"/jobs/{job_id}", done=done)

    async def selected_action(self, request: Request) -> Response:
        """Retry, cancel or delete the jobs ticked on the jobs list (each as its own button
        would: the same rules, a job that may not be acted on is counted, not an error)."""
        fields = await self._form(request)
        form = dict(fields)
        action = form.get("action")
        if action not in ("retry", "cancel", "delete"):
            raise HTTPException(400, "choose an action: retry, cancel or delete")
        ids = sorted({_form_id(value) for name, value in fields if name == "id"})
        if not ids:
            raise HTTPException(400, "no job selected: tick the jobs to act on")
        if len(ids) > MAX_SELECTED:
            raise HTTPException(400, f"at most {MAX_SELECTED} jobs at once, got {len(ids)}")
        outcome = await run_in_threadpool(self._act_on, action, ids)
        back = {name: value for name, value in fields if name in FILTER_FIELDS}
        done = {"retry": "selected-retried", "cancel": "selected-cancelled"}.get(
            action, "selected-deleted"
        )
        return self._back(request, "/jobs", **back, done=done, **outcome)

    def _act_on(self, action: str, ids: list[int]) -> dict[str, int]:
        done = requested = refused = 0
        for job_id in ids:
            try:
                if action == "retry":
                    retried = admin.retry_job(self.app, job_id).retried
                    done, refused = done + retried, refused + (not retried)
                elif action == "cancel":
                    outcome = self.app.cancel(job_id).outcome
                    done += outcome == "cancelled"
                    requested += outcome == "requested"
                    refused += outcome == "already_finished"
                else:
                    deleted, _ = admin.delete_finished_job(self.app, job_id)
                    done, refused = done + deleted, refused + (not deleted)
            except (JobNotFoundError, UniqueKeyTakenError, WorkflowProtectedError):
                refused += 1
        return {"count": done, "requested": requested, "refused": refused}

    async def queue_action(self, request: Request) -> Response:
        """Pause or resume the queue the form names (migration 0007)."""
        form = dict(await self._form(request))
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
        form = dict(await self._form(request))
        job_filter = _filter_or_400(form)
        if job_filter.empty:
            raise HTTPException(
                400, "a bulk action needs a filter (e.g. status=failed): refusing every job"
            )
        query = job_filter.as_query()
        if request.path_params["action"] == "retry":
            try:
                ids = await run_in_threadpool(admin.retry_matching, self.app, job_filter)
            except (UniqueKeyTakenError, WorkflowProtectedError) as error:
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

    def close(self) -> None:
        """Close the dashboard's pool (its event streams end with close_streams)."""
        self.db.close()
        for other in self.mounted:
            other.close()


# -- request helpers ------------------------------------------------------------------------------
def _base(request: Request) -> str:
    """The path the dashboard is mounted at ("" at the root)."""
    return str(request.scope.get("root_path", ""))


def _route_path(request: Request) -> str:
    path = str(request.scope.get("path", "/"))
    base = _base(request)
    return (path[len(base) :] if base and path.startswith(base) else path) or "/"


def _live_url(request: Request, page: str, query: str = "") -> str:
    url = f"{_base(request)}/events{'' if page == '/' else page}"
    return f"{url}?{query}" if query else url


def _filter_or_400(params: Mapping[str, str]) -> JobFilter:
    try:
        return parse_job_filter(params)
    except ValueError as error:
        raise HTTPException(400, f"bad filter: {error}") from None


def _tab_links(job_filter: JobFilter) -> dict[str, str]:
    """The query string of each status tab: the filter with that status (and no paging)."""
    query = job_filter.as_query()
    query.pop("status", None)
    links = {"": _query(query)}
    for status in TAB_STATUSES:
        links[status] = _query({**query, "status": status})
    return links


def _optional_id(text: str | None, name: str) -> int | None:
    if text is None or text == "":
        return None
    if not text.isascii() or not text.isdigit() or int(text) > MAX_ID:
        raise HTTPException(400, f"{name} must be a job id (a positive integer), got {text!r}")
    return int(text)


def _form_id(text: str) -> int:
    job_id = _optional_id(text, "id")
    if job_id is None:
        raise HTTPException(400, "id must be a job id (a positive integer), got ''")
    return job_id


def _id_or_404(text: str) -> int:
    if not text.isascii() or not text.isdigit() or int(text) > MAX_ID:
        raise HTTPException(404, f"no job {text!r}: job ids are positive integers")
    return int(text)


def _path_id(request: Request) -> int:
    return _id_or_404(request.path_params["job_id"])


def _message(request: Request) -> str | None:
    done = request.query_params.get("done")
    template = MESSAGES.get(done or "")
    if template is None:
        return None

    def number(name: str) -> int:
        text = request.query_params.get(name, "0")
        return int(text) if text.isascii() and text.isdigit() and len(text) < 10 else 0

    return template.format(
        count=number("count"), requested=number("requested"), refused=number("refused")
    )


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
            status, detail = error.status_code, str(error.detail)
        elif isinstance(error, psycopg.errors.QueryCanceled):
            status = 503
            detail = (
                "the page's query ran longer than the dashboard's statement timeout"
                f" ({dashboard.db.statement_timeout:g} s): narrow the filter and try again"
            )
        elif isinstance(error, PgTasksError):
            # The database is down, the schema not migrated, the pool exhausted: say so.
            status, detail = 503, str(error)
        elif isinstance(error, psycopg.Error):
            status = 503
            detail = f"the database refused the page's query: {type(error).__name__}"
        else:  # pragma: no cover - Starlette routes only the kinds above here
            raise error
        if "application/json" in request.headers.get("accept", ""):
            return JSONResponse({"error": detail}, status_code=status)
        return dashboard.page(
            request, "error.html", status_code=status, status=status, detail=detail
        )

    return handle


def _plain(status: int, text: str, headers: dict[str, str] | None = None) -> Response:
    return Response(text + "\n", status, headers=headers, media_type="text/plain")


#: Pages whose address with a trailing slash is redirected to the address without it.
_SLASHED = ("/jobs/", "/workers/", "/schedules/")


class DashboardApp:
    """The dashboard's ASGI application: the Host check, authentication, then the routes,
    with security headers on every response (refusals included). ``dashboard`` holds its
    state (the App, the live hub, the pool).
    """

    def __init__(self, inner: ASGIApp, dashboard: Dashboard) -> None:
        self.inner = inner
        self.dashboard = dashboard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
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

        request = Request(scope)
        refusal = self._refusal(request) or self._slash_redirect(request)
        if refusal is not None:
            await refusal(scope, receive, send_with_headers)
            return
        await self.inner(scope, receive, send_with_headers)

    def close_streams(self) -> None:
        """End the open event streams (the server is stopping; safe from a signal handler).

        Streams also end by themselves on SIGTERM and SIGINT when the server runs in the
        main thread, and after ``stream_max_age`` seconds.
        """
        self.dashboard.live.close_streams()
        for other in self.dashboard.mounted:
            other.close_streams()

    def close(self) -> None:
        """Close the dashboard's own connections (e.g. at the application's shutdown)."""
        self.dashboard.close()

    def _refusal(self, request: Request) -> Response | None:
        dashboard = self.dashboard
        name = host_name(request.headers.get("host"))
        if name is None:
            return _plain(400, "pgtasks web: the request has no valid Host header")
        allowed = dashboard.allowed_hosts
        if dashboard.auth is None:
            named = is_loopback_host(name) or (allowed is not None and host_matches(name, allowed))
            if not named:
                return _plain(
                    421,
                    f"pgtasks web: this dashboard has no authentication, so it answers only"
                    f" requests addressed to localhost, 127.0.0.1 or [::1], not to {name!r}"
                    " (a page of another site may have made this request through DNS"
                    " rebinding). To serve it under another name, add that name to"
                    " allowed_hosts (pgtasks web --allowed-host NAME) and configure"
                    " authentication.",
                )
            if not dashboard.insecure_no_auth:
                forwarded = forwarding_header(request.headers)
                if forwarded is not None:
                    return _plain(
                        403,
                        f"pgtasks web: this request came through a proxy ({forwarded} header)"
                        " and the dashboard has no authentication, so it refuses it: behind"
                        " a proxy every client would look local. Set PGTASKS_WEB_USER and"
                        " PGTASKS_WEB_PASSWORD (pgtasks web) or pass auth= to"
                        " pgtasks.web.asgi(); or authenticate in the proxy and pass"
                        " insecure_no_auth=True (pgtasks web --insecure-no-auth).",
                    )
                client = request.client.host if request.client else None
                if not is_loopback(client):
                    return _plain(
                        401,
                        "pgtasks web: no authentication is configured, so only loopback"
                        " clients are served. Set PGTASKS_WEB_USER and PGTASKS_WEB_PASSWORD"
                        " (pgtasks web) or pass auth= to pgtasks.web.asgi().",
                    )
            return None
        if allowed is not None and not host_matches(name, allowed):
            return _plain(
                421,
                f"pgtasks web: requests addressed to {name!r} are not served here (not in"
                " allowed_hosts)",
            )
        client = request.client.host if request.client else "unknown"
        wait = dashboard.failed_logins.retry_after(client)
        if wait is not None:
            return _plain(
                429,
                f"pgtasks web: too many failed logins from {client}; try again in {wait:.0f} s",
                {"retry-after": str(round(wait))},
            )
        given = credentials(request)
        if given is not None and dashboard.auth(*given):
            return None
        if request.headers.get("authorization") is not None:
            dashboard.failed_logins.failed(client)
        return _plain(
            401,
            "authentication required",
            {"www-authenticate": 'Basic realm="pgtasks", charset="UTF-8"'},
        )

    @staticmethod
    def _slash_redirect(request: Request) -> Response | None:
        """/jobs/ → /jobs (a path of the dashboard's, never the Host: no open redirect)."""
        path = _route_path(request)
        if request.method not in ("GET", "HEAD") or path not in _SLASHED:
            return None
        query = request.url.query
        target = f"{_base(request)}{path.rstrip('/')}" + (f"?{query}" if query else "")
        return RedirectResponse(target, 308)


def asgi(
    app: App,
    *,
    auth: AuthCallable | None = None,
    read_only: bool = False,
    insecure_no_auth: bool = False,
    allowed_hosts: Sequence[str] | None = None,
    secret: bytes | None = None,
    debounce: float = 0.25,
    poll: float = 5.0,
    pool_size: int = 4,
    statement_timeout: float = 5.0,
    stream_max_age: float = 300.0,
    login_attempts: int = 10,
) -> DashboardApp:
    """The dashboard of ``app`` as an ASGI application, to serve or mount.

    ``auth(user, password) -> bool`` checks HTTP basic credentials on every request
    (``pgtasks.web.basic_auth(user, password)`` builds one); a client with
    ``login_attempts`` failed attempts within a minute is refused (429) for the rest of
    it. Without ``auth`` only loopback clients are served, and no request a proxy
    forwarded, unless ``insecure_no_auth``. ``allowed_hosts``: the Host names served
    besides localhost and loopback addresses without ``auth`` (``.example.com`` for a
    domain and its subdomains, ``*`` for any); with ``auth``, when given, the only ones
    served. ``read_only`` hides every action and refuses its POST (403). ``secret`` keys
    the CSRF token (random per process when omitted). ``debounce`` / ``poll``: the live
    pages' shortest and longest gaps between two refreshes, in seconds;
    ``stream_max_age``: an event stream's longest life (the browser reconnects).
    ``pool_size`` and ``statement_timeout``: the dashboard's own connections and how long
    one of its queries may run.
    """
    key = secret if secret is not None else secrets.token_bytes(32)
    options: dict[str, Any] = {
        "auth": auth,
        "read_only": read_only,
        "insecure_no_auth": insecure_no_auth,
        "allowed_hosts": allowed_hosts,
        "secret": key,
        "debounce": debounce,
        "poll": poll,
        "pool_size": pool_size,
        "statement_timeout": statement_timeout,
        "stream_max_age": stream_max_age,
        "login_attempts": login_attempts,
    }
    root = app if not app.stores.single and app.settings.store is None else None
    if root is not None:
        app = app.for_store(DEFAULT_STORE)  # at the root: the default store's dashboard
    dashboard = Dashboard(
        app,
        auth=auth,
        read_only=read_only,
        insecure_no_auth=insecure_no_auth,
        allowed_hosts=allowed_hosts,
        secret=key,
        debounce=debounce,
        poll=poll,
        pool_size=pool_size,
        statement_timeout=statement_timeout,
        stream_max_age=stream_max_age,
        login_attempts=login_attempts,
    )
    routes = [
        Route("/", dashboard.overview, name="overview"),
        Route("/favicon.ico", dashboard.favicon, name="favicon"),
        Route("/events", dashboard.events, name="events"),
        Route("/events/{page:path}", dashboard.events),
        Route("/jobs", dashboard.jobs, name="jobs"),
        Route("/jobs/counts", dashboard.job_counts, name="job_counts"),
        Route("/jobs/selected", dashboard.selected_action, methods=["POST"]),
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
        exception_handlers={HTTPException: handler, PgTasksError: handler, psycopg.Error: handler},
    )
    # A redirect to the same path with or without a slash would name the request's Host.
    starlette.router.redirect_slashes = False
    starlette.state.dashboard = dashboard
    if root is not None:  # and each other store's, at /stores/<name>
        mounted = {name: asgi(root.for_store(name), **options) for name in store_names(root)}
        mount_stores(starlette, mounted)
        dashboard.mounted = list(mounted.values())
    return DashboardApp(starlette, dashboard)


def _only(
    actions: tuple[str, ...], endpoint: Callable[[Request], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    async def guarded(request: Request) -> Response:
        if request.path_params["action"] not in actions:
            raise HTTPException(404, f"no such action: {request.path_params['action']!r}")
        return await endpoint(request)

    return guarded
