"""Dashboard test helpers: requests through httpx's ASGI transport (Client) and a real
uvicorn server in a thread (Served)."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import httpx
import uvicorn

from pgtasks.web.app import Dashboard
from tests.support.waiting import wait_until

BASE_URL = "http://localhost:8080"
LOOPBACK = ("127.0.0.1", 50000)
REMOTE = ("203.0.113.7", 50000)


class Client:
    """Requests to one ASGI dashboard through httpx's ASGI transport."""

    def __init__(self, dashboard: Any, client: tuple[str, int] = LOOPBACK) -> None:
        self.dashboard = dashboard
        self.client = client

    @property
    def state(self) -> Dashboard:
        inner: Dashboard = self.dashboard.dashboard
        return inner

    def request(self, method: str, path: str, **options: Any) -> httpx.Response:
        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.dashboard, client=self.client)
            async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
                return await client.request(method, path, **options)

        return asyncio.run(send())

    def get(self, path: str, **options: Any) -> httpx.Response:
        return self.request("GET", path, **options)

    def post(
        self,
        path: str,
        data: dict[str, str] | None = None,
        *,
        csrf: bool = True,
        origin: str | None = BASE_URL,
        **options: Any,
    ) -> httpx.Response:
        """A form POST as the dashboard's own pages send it (token and Origin), unless told."""
        form = dict(data or {})
        if csrf:
            form.setdefault("csrf", self.state.csrf)
        headers = dict(options.pop("headers", {}))
        if origin is not None:
            headers.setdefault("origin", origin)
        return self.request("POST", path, data=form, headers=headers, **options)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Served:
    """A dashboard served by uvicorn in a thread of this process."""

    def __init__(self, dashboard: Any) -> None:
        self.dashboard = dashboard
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            dashboard, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        wait_until(lambda: self.server.started, timeout=10, message="uvicorn to start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
