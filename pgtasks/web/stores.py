"""The dashboard of an app of several stores: the default store's dashboard at the root,
each other store's mounted at ``/stores/<name>`` (its own connections, pages and live
streams), every page naming its store with links to the others; a job or workflow page
of an id another store issued redirects there (an id names its store). ``/stores`` shows every
store at once: each asked concurrently on its own connections, a store that does not
answer shown as down while the others are shown as usual."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.routing import Mount

from .._app.layout import DEFAULT_STORE
from .._errors import JobNotFoundError, PgTasksError
from .reads import DashboardDatabase, StatusCounts, read_status_counts

if TYPE_CHECKING:
    from .._app.app import App
    from .app import Dashboard

#: Seconds the page of every store waits for one store's answer before showing it as
#: down (its reads are also bounded by the dashboard's statement timeout).
STORE_ANSWER_SECONDS = 10.0


def store_path(name: str) -> str:
    return "" if name == DEFAULT_STORE else f"/stores/{name}"


def store_links(app: App, base: str, mount: str, linked: bool) -> dict[str, Any]:
    """The store a page shows and a link to each store's dashboard (an app of one store:
    none; ``linked`` False: a dashboard of one store of several, whose neighbours are not
    served beside it, names its store only)."""
    if app.store_router.single:
        return {"store": None, "stores": []}
    if not linked:
        return {"store": app.store_name, "stores": []}
    home = base[: len(base) - len(mount)] if mount and base.endswith(mount) else base
    links = [(name, f"{home}{store_path(name)}/") for name in app.store_router.names]
    return {"store": app.store_name, "stores": links, "all_stores": f"{home}/stores"}


def home_of(app: App, object_id: int, base: str, mount: str, linked: bool) -> str | None:
    """The dashboard (its path) of the store that issued the job or workflow id
    ``object_id``, when that is not this one (None: this one, no store of the app issued
    it, or the other stores' dashboards are not served beside this one: ``linked``
    False)."""
    if app.store_router.single or not linked:
        return None
    try:
        owner = app.routing.for_id(object_id)
    except JobNotFoundError:
        return None
    if owner.store_name == app.store_name:
        return None
    home = base[: len(base) - len(mount)] if mount and base.endswith(mount) else base
    return f"{home}{store_path(owner.store_name)}"


def store_names(app: App) -> list[str]:
    """The stores of ``app`` other than the default one (each mounted at its path)."""
    return [name for name in app.store_router.names if name != DEFAULT_STORE]


def mount_stores(starlette: Starlette, mounted: dict[str, Any]) -> None:
    """Mount each other store's dashboard (a DashboardApp, by store name) at
    ``/stores/<name>`` in the root's routes."""
    for name, inner in mounted.items():
        inner.dashboard.mount = store_path(name)
        starlette.router.routes.insert(0, Mount(store_path(name), app=inner))


# -- every store at once --------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class StoreSummary:
    """One store on the page of every store: its jobs per queue and status and its live
    workers, or (``error``) why it did not answer."""

    name: str
    #: Its dashboard (under the root's path).
    href: str
    schema: str
    database: str
    now: datetime | None = None
    counts: StatusCounts | None = None
    live_workers: int = 0
    error: str | None = None


def read_summary(app: App, database: DashboardDatabase) -> tuple[datetime, StatusCounts, int]:
    """A store's counts (as its overview reads them) and live workers, in one read."""

    def read(conn: psycopg.Connection[Any]) -> tuple[datetime, StatusCounts, int]:
        counts = read_status_counts(database.queries, conn)
        now, workers = app.admin.read_workers(conn, since=0.0)
        return now, counts, sum(worker.state == "live" for worker in workers)

    return database.run(read)


async def summaries(dashboards: Sequence[Dashboard], home: str) -> list[StoreSummary]:
    """Each store's summary, read concurrently on its dashboard's own connections; a store
    that fails or does not answer within STORE_ANSWER_SECONDS is its own error."""

    async def one(dashboard: Dashboard) -> StoreSummary:
        app = dashboard.app
        found = StoreSummary(
            name=app.store_name,
            href=f"{home}{store_path(app.store_name)}/",
            schema=app.schema,
            database=app.describe_database(),
        )
        try:
            now, counts, live = await asyncio.wait_for(
                run_in_threadpool(read_summary, app, dashboard.db), STORE_ANSWER_SECONDS
            )
        except asyncio.TimeoutError:
            return dataclasses.replace(found, error=f"no answer within {STORE_ANSWER_SECONDS:g} s")
        except (PgTasksError, psycopg.Error) as error:
            return dataclasses.replace(found, error=describe_failure(error, dashboard))
        return dataclasses.replace(found, now=now, counts=counts, live_workers=live)

    return list(await asyncio.gather(*(one(dashboard) for dashboard in dashboards)))


def describe_failure(error: Exception, dashboard: Dashboard) -> str:
    """What a store's failed read says on the page (as its own error page would)."""
    if isinstance(error, psycopg.errors.QueryCanceled):
        return (
            "its query ran longer than the dashboard's statement timeout"
            f" ({dashboard.db.statement_timeout:g} s)"
        )
    if isinstance(error, PgTasksError):  # down, not migrated, pool exhausted: it says so
        return str(error)
    return f"the database refused the query: {type(error).__name__}"
