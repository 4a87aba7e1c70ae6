"""Fixtures of the dashboard tests: the ASGI app over a fresh schema, requests through
httpx's ASGI transport, and a real uvicorn server for the event stream and the browser.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pgtasks import App
from pgtasks.web import asgi
from tests.support.web import LOOPBACK, Client, Served


@pytest.fixture
def make_client(app: App) -> Iterator[Callable[..., Client]]:
    """Clients of dashboards of ``app``; each dashboard's own pool is closed after the
    test (before the App's schema is dropped), not left open to the end of the process."""
    made: list[Client] = []

    def factory(*, client: tuple[str, int] = LOOPBACK, **options: Any) -> Client:
        made.append(Client(asgi(app, **options), client))
        return made[-1]

    yield factory
    for client in made:
        client.dashboard.close()


@pytest.fixture
def web(make_client: Callable[..., Client]) -> Client:
    return make_client()


@pytest.fixture
def serve() -> Iterator[Callable[..., Served]]:
    """Start ``Served`` dashboards; all are stopped after the test."""
    started: list[Served] = []

    def start(dashboard: Any) -> Served:
        served = Served(dashboard).__enter__()
        started.append(served)
        return served

    yield start
    for served in started:
        served.__exit__()
