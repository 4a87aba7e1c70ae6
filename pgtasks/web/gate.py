"""The dashboard's gate: every request passes the Host check and authentication (or is
refused with a plain-text reason) and gets the security headers; errors become pages.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import psycopg
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._errors import PgTasksError
from .requests import base_path, route_path
from .security import (
    credentials,
    forwarding_header,
    host_matches,
    host_name,
    is_loopback,
    is_loopback_host,
)

if TYPE_CHECKING:
    from .app import Dashboard

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


def error_page(dashboard: Dashboard) -> Callable[[Request, Exception], Awaitable[Response]]:
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
_SLASHED = ("/jobs/", "/workflows/", "/workers/", "/schedules/", "/stores/")


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
        path = route_path(request)
        if request.method not in ("GET", "HEAD") or path not in _SLASHED:
            return None
        query = request.url.query
        target = f"{base_path(request)}{path.rstrip('/')}" + (f"?{query}" if query else "")
        return RedirectResponse(target, 308)
