"""The dashboard as an ASGI application (Starlette + Jinja2, vendored htmx, server-sent
events): ``asgi(app)`` builds it; ``pgtasks web`` serves it with uvicorn.

Reads are the dashboard's own (``pgtasks.web.reads``, queries in ``sql/web.sql``) on a
small pool of its own with a statement timeout; writes (``pgtasks.web.actions``) use the
same functions as the CLI (``app.cancel``, ``app.admin.retry_job``, …). Database calls are
synchronous and run in Starlette's thread pool. Pages with a live part (overview, jobs, a
job, workflows, a workflow, limits, workers) render it with the same template the event
stream pushes (live.py). The workflow pages are in workflow_pages.py, the limits page in
limit_pages.py.

Pages read from the app's replica when it has one (``replica_dsn``), except the page an
action redirects to (its URL carries ``done=``): that one reads the primary, so the
change just made shows at once.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from markupsafe import Markup
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
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .._app.layout import DEFAULT_STORE
from .._errors import (
    JobNotFoundError,
    PgTasksError,
)
from .._job_filter import JobFilter
from .._operations import RETRYABLE
from .actions import Actions
from .charts import Charts, charts
from .controls import SNOOZES, ControlActions
from .gate import DashboardApp, error_page
from .job_reads import job_page as read_job_page
from .limit_pages import LimitPages
from .live import LiveHub, event_stream
from .reads import (
    SCAN_ROWS,
    DashboardDatabase,
    FinishedMinutes,
)
from .reads import (
    bulk_counts as read_bulk_counts,
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
from .rendering import environment
from .requests import (
    base_path,
    filter_or_400,
    id_or_404,
    live_url,
    message,
    optional_id,
    path_id,
    query_string,
    route_path,
    tab_links,
    timeline,
)
from .security import (
    AuthCallable,
    FailedLogins,
    csrf_token,
)
from .stores import home_of, mount_stores, store_links, store_names, summaries
from .where import workers_page
from .workflow_pages import WorkflowPages

if TYPE_CHECKING:
    from .._app.app import App

HERE = Path(__file__).resolve().parent
#: Jobs per page of the jobs list.
PAGE_SIZE = 50
#: Seconds the overview's charts are reused (they count per minute; each read fetches a
#: row per job finished in the hour).
CHART_MAX_AGE = 10.0


@dataclasses.dataclass
class _Charts:
    """The overview's charts of one read of the finished minutes (reused CHART_MAX_AGE
    seconds) and their markup, rendered once per path the dashboard is served at (the
    overview's heaviest part: a bar per queue, minute and status)."""

    read_at: float
    finished: FinishedMinutes
    charts: Charts
    html: dict[str, Markup] = dataclasses.field(default_factory=dict)


class Dashboard:
    """The pages and live streams of one dashboard over one App (its POST routes:
    ``pgtasks.web.actions``)."""

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
        self.templates = environment()
        self.db = DashboardDatabase(app, pool_size=pool_size, statement_timeout=statement_timeout)
        self.live = LiveHub(app, debounce=debounce, poll=poll)
        self.stream_max_age = stream_max_age
        self.failed_logins = FailedLogins(limit=login_attempts)
        self._chart: _Charts | None = None
        #: Where this store's dashboard is mounted in the dashboard of an app of several
        #: stores ("/stores/<name>"; "" for the default store's, at the root).
        self.mount = ""
        #: The other stores' dashboards, mounted in this one (the root's): closed with it.
        self.mounted: list[DashboardApp] = []
        #: The POST routes (actions.py) and the workflow pages (workflow_pages.py).
        self.actions = Actions(self)
        self.controls = ControlActions(self)
        self.workflow_pages = WorkflowPages(self)
        self.limit_pages = LimitPages(self)

    @property
    def linked(self) -> bool:
        """Whether the other stores' dashboards are served beside this one (the root of an
        app of several stores, or one mounted in it)."""
        return bool(self.mount or self.mounted)

    # -- rendering --
    def _common(self, base: str) -> dict[str, Any]:
        return {
            "base": base,
            "read_only": self.read_only,
            "csrf": self.csrf,
            "schema": self.app.schema,
            **store_links(self.app, base, self.mount, self.linked),
        }

    def fragment(self, template: str, base: str, **context: Any) -> str:
        return self.templates.get_template(template).render(**self._common(base), **context)

    def page(
        self, request: Request, template: str, status_code: int = 200, **context: Any
    ) -> HTMLResponse:
        base = base_path(request)
        html = self.templates.get_template(template).render(
            **self._common(base),
            path=route_path(request),
            database=self.app.describe_database(),
            **context,
        )
        return HTMLResponse(html, status_code=status_code)

    def elsewhere(self, request: Request, object_id: int) -> str | None:
        """The dashboard (its path) of the store that issued the job or workflow id
        ``object_id``, when that is another store's served beside this one."""
        return home_of(self.app, object_id, base_path(request), self.mount, self.linked)

    def reads(self, request: Request) -> DashboardDatabase:
        """Where a page reads: the replica when the app has one, except right after an
        action (``done=``), whose page must show the change it made (the primary)."""
        return self.db.on_primary() if "done" in request.query_params else self.db

    # -- what each page shows (run in a thread) --
    def overview_context(self, db: DashboardDatabase | None = None) -> dict[str, Any]:
        cached = self._chart
        fresh = cached is not None and time.monotonic() - cached.read_at < CHART_MAX_AGE
        data = read_overview(
            self.app, db or self.db, finished=cached.finished if fresh and cached else None
        )
        if cached is None or not fresh:
            cached = self._chart = _Charts(time.monotonic(), data.finished, charts(data.finished))
        chart = cached

        def chart_html(base: str) -> Markup:
            html = chart.html.get(base)
            if html is None:
                template = self.templates.get_template("_charts.html")
                html = Markup(template.render(base=base, charts=chart.charts))  # noqa: S704
                if len(chart.html) < 8:  # one per path the dashboard is served at
                    chart.html[base] = html
            return html

        return {
            "overview": data,
            "now": data.now,
            "charts": chart.charts,
            "chart_html": chart_html,
        }

    def jobs_context(
        self, job_filter: JobFilter, before: int | None, db: DashboardDatabase | None = None
    ) -> dict[str, Any]:
        data = read_jobs_page(db or self.db, job_filter, before=before, limit=PAGE_SIZE)
        query = job_filter.as_query()
        older = None
        if data.more and data.jobs:
            older = query_string({**query, "before": data.jobs[-1].id})
        elif data.searched_to is not None:  # not a full page: the scan stopped there
            older = query_string({**query, "before": data.searched_to})
        counts = data.counts
        return {
            "now": data.now,
            "jobs": data.jobs,
            "filter": job_filter,
            "query": query,
            "query_string": query_string(query),
            "older": older,
            "paged": before is not None,
            "searched_to": data.searched_to,
            "scan_rows": SCAN_ROWS,
            "counts": counts,
            "tab_counts": counts.of(job_filter.queue)
            if counts is not None and job_filter.counted_by_status
            else None,
            "tab_links": tab_links(job_filter),
        }

    def job_context(self, job_id: int, db: DashboardDatabase | None = None) -> dict[str, Any]:
        data = read_job_page(db or self.db, job_id)
        job = data.job
        return {
            "now": data.now,
            "page": data,
            "job": job,
            "timeline": timeline(job),
            "retryable": job.status.value in RETRYABLE,
            "snoozes": SNOOZES,
        }

    def workers_context(self, db: DashboardDatabase | None = None) -> dict[str, Any]:
        return {**workers_page(self.app, db or self.db), "lease": self.app.lease_timeout}

    # -- pages --
    async def overview(self, request: Request) -> Response:
        context = await run_in_threadpool(self.overview_context, self.reads(request))
        return self.page(
            request,
            "overview.html",
            live=live_url(request, "/"),
            message=message(request),
            **context,
        )

    async def jobs(self, request: Request) -> Response:
        job_filter = filter_or_400(request.query_params)
        before = optional_id(request.query_params.get("before"), "before")
        context = await run_in_threadpool(
            self.jobs_context, job_filter, before, self.reads(request)
        )
        return self.page(
            request,
            "jobs.html",
            live=live_url(request, "/jobs", query_string({**context["query"], "before": before})),
            counts_url=f"{base_path(request)}/jobs/counts?{context['query_string']}"
            if not job_filter.empty
            else None,
            message=message(request),
            tasks=sorted(self.app.tasks),
            **context,
        )

    async def job_counts(self, request: Request) -> Response:
        """How many jobs each bulk action of the filter would touch (the buttons say it)."""
        job_filter = filter_or_400(request.query_params)
        counts = await run_in_threadpool(read_bulk_counts, self.db, job_filter)
        return JSONResponse(counts.as_json())

    async def job(self, request: Request) -> Response:
        job_id = path_id(request)
        there = self.elsewhere(request, job_id)
        if there is not None:  # the id names another store: its dashboard
            return RedirectResponse(f"{there}/jobs/{job_id}", status_code=303)
        try:
            context = await run_in_threadpool(self.job_context, job_id, self.reads(request))
        except JobNotFoundError as error:
            raise HTTPException(404, str(error)) from None
        return self.page(
            request,
            "job.html",
            live=live_url(request, f"/jobs/{job_id}"),
            message=message(request),
            **context,
        )

    async def workers(self, request: Request) -> Response:
        context = await run_in_threadpool(self.workers_context, self.reads(request))
        return self.page(
            request,
            "workers.html",
            live=live_url(request, "/workers"),
            message=message(request),
            **context,
        )

    async def schedules(self, request: Request) -> Response:
        now, statuses = await run_in_threadpool(read_schedules, self.app, self.reads(request))
        return self.page(request, "schedules.html", now=now, schedules=statuses)

    async def all_stores(self, request: Request) -> Response:
        """Every store of the app at once (the root dashboard of an app of several)."""
        dashboards = [self, *(mounted.dashboard for mounted in self.mounted)]
        found = await summaries(dashboards, base_path(request))
        return self.page(request, "stores.html", summaries=found)

    async def favicon(self, request: Request) -> Response:
        return FileResponse(HERE / "static" / "favicon.ico", media_type="image/x-icon")

    # -- live updates --
    async def events(self, request: Request) -> Response:
        """The event stream of one page's live part: ``/events`` (the overview),
        ``/events/jobs?FILTER``, ``/events/jobs/ID``, ``/events/workflows?FILTER``,
        ``/events/workflows/ID``, ``/events/limits?QUERY`` or ``/events/workers``."""
        base = base_path(request)
        page = "/" + request.path_params.get("page", "")
        kind, _, item = page[1:].partition("/")
        if kind == "workflows":
            key, render = self.workflow_pages.live_view(request, base, item)
        elif page == "/limits":
            key, render = self.limit_pages.live_view(request, base)
        elif item and kind == "jobs":
            job_id = id_or_404(item)
            key, render = (
                ("job", base, job_id),
                lambda: self.fragment("_job_live.html", base, **self.job_context(job_id)),
            )
        else:
            key, render = self._list_view(request, base, page)
        return event_stream(self.live, key, render, self.stream_max_age)

    def _list_view(
        self, request: Request, base: str, page: str
    ) -> tuple[tuple[Any, ...], Callable[[], str]]:
        """The key and renderer of the live part of the overview, the jobs list or the
        workers page."""
        if page == "/":
            return ("overview", base), lambda: self.fragment(
                "_overview_live.html", base, **self.overview_context()
            )
        if page == "/workers":
            return ("workers", base), lambda: self.fragment(
                "_workers_live.html", base, **self.workers_context()
            )
        if page == "/jobs":
            job_filter = filter_or_400(request.query_params)
            before = optional_id(request.query_params.get("before"), "before")
            return ("jobs", base, query_string({**job_filter.as_query(), "before": before})), (
                lambda: self.fragment(
                    "_jobs_live.html", base, **self.jobs_context(job_filter, before)
                )
            )
        raise HTTPException(404, f"no live page {page!r}")

    def close(self) -> None:
        """Close the dashboard's pool (its event streams end with close_streams)."""
        self.db.close()
        for other in self.mounted:
            other.close()


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
    root = app if not app.store_router.single and app.settings.store is None else None
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
    actions = dashboard.actions
    routes = [
        Route("/", dashboard.overview, name="overview"),
        Route("/favicon.ico", dashboard.favicon, name="favicon"),
        Route("/events", dashboard.events, name="events"),
        Route("/events/{page:path}", dashboard.events),
        Route("/jobs", dashboard.jobs, name="jobs"),
        Route("/jobs/counts", dashboard.job_counts, name="job_counts"),
        Route("/jobs/selected", actions.selected, methods=["POST"]),
        Route(
            "/jobs/bulk/{action:str}",
            _only(("retry", "cancel", "run_now"), actions.bulk),
            methods=["POST"],
        ),
        Route("/jobs/{job_id:str}", dashboard.job, name="job"),
        Route(
            "/jobs/{job_id:str}/{action:str}",
            _either(
                _only(("retry", "cancel", "delete", "terminate"), actions.job),
                _only(("run_now", "snooze", "edit"), dashboard.controls.job),
            ),
            methods=["POST"],
        ),
        Route(
            "/queues/{action:str}",
            _only(("pause", "resume"), actions.queue),
            methods=["POST"],
        ),
        Route("/workflows", dashboard.workflow_pages.workflows, name="workflows"),
        Route("/workflows/{workflow_id:str}", dashboard.workflow_pages.workflow, name="workflow"),
        Route(
            "/workflows/{workflow_id:str}/{action:str}",
            _only(("cancel",), dashboard.workflow_pages.cancel),
            methods=["POST"],
        ),
        Route("/limits", dashboard.limit_pages.limits, name="limits"),
        Route(
            "/limits/{action:str}",
            _only(("set", "pause", "resume", "reset"), dashboard.controls.limit),
            methods=["POST"],
        ),
        Route("/workers", dashboard.workers, name="workers"),
        Route(
            "/workers/{worker_id:str}/{action:str}",
            _only(("pool_grow", "pool_shrink"), dashboard.controls.pool),
            methods=["POST"],
        ),
        Route("/hosts/{action:str}", _only(("pause", "resume"), actions.host), methods=["POST"]),
        Route("/schedules", dashboard.schedules, name="schedules"),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    handler = error_page(dashboard)
    starlette = Starlette(
        routes=routes,
        exception_handlers={HTTPException: handler, PgTasksError: handler, psycopg.Error: handler},
    )
    # A redirect to the same path with or without a slash would name the request's Host.
    starlette.router.redirect_slashes = False
    starlette.state.dashboard = dashboard
    if root is not None:  # each other store's at /stores/<name>, every store at /stores
        mounted = {name: asgi(root.for_store(name), **options) for name in store_names(root)}
        mount_stores(starlette, mounted)
        dashboard.mounted = list(mounted.values())
        starlette.router.routes.insert(0, Route("/stores", dashboard.all_stores, name="stores"))
    return DashboardApp(starlette, dashboard)


def _only(
    actions: tuple[str, ...], endpoint: Callable[[Request], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    async def guarded(request: Request) -> Response:
        if request.path_params["action"] not in actions:
            raise HTTPException(404, f"no such action: {request.path_params['action']!r}")
        return await endpoint(request)

    return guarded


def _either(
    first: Callable[[Request], Awaitable[Response]],
    second: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """``first``, or ``second`` for the actions ``first`` does not know (a 404 from it)."""

    async def either(request: Request) -> Response:
        try:
            return await first(request)
        except HTTPException as error:
            if error.status_code != 404 or not error.detail.startswith("no such action"):
                raise
        return await second(request)

    return either
