"""The dashboard of an app of several stores: the default store's dashboard at the root,
each other store's mounted at ``/stores/<name>`` (its own connections, pages and live
streams), every page naming its store with links to the others; a job page of an id
another store issued redirects there (an id names its store)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.routing import Mount

from .._app.layout import DEFAULT_STORE
from .._app.routing import for_id
from .._errors import JobNotFoundError

if TYPE_CHECKING:
    from .._app.app import App
    from .app import Dashboard, DashboardApp


def store_path(name: str) -> str:
    return "" if name == DEFAULT_STORE else f"/stores/{name}"


def store_links(app: App, base: str, mount: str) -> dict[str, Any]:
    """The store a page shows and a link to each store's dashboard (an app of one store:
    none)."""
    if app.stores.single:
        return {"store": None, "stores": []}
    home = base[: len(base) - len(mount)] if mount and base.endswith(mount) else base
    links = [(name, f"{home}{store_path(name)}/") for name in app.stores.names]
    return {"store": app.store_name, "stores": links}


def job_elsewhere(app: App, job_id: int, base: str, mount: str) -> str | None:
    """The job page in the dashboard of the store that issued ``job_id``, when that is not
    this one (None: this one, or no store of the app issued it)."""
    if app.stores.single:
        return None
    try:
        owner = for_id(app, job_id)
    except JobNotFoundError:
        return None
    if owner.store_name == app.store_name:
        return None
    home = base[: len(base) - len(mount)] if mount and base.endswith(mount) else base
    return f"{home}{store_path(owner.store_name)}/jobs/{job_id}"


def mount_stores(
    app: App, starlette: Starlette, dashboard: Dashboard, options: dict[str, Any]
) -> DashboardApp:
    """The root dashboard (the default store's, ``starlette``) with each other store's
    dashboard mounted at ``/stores/<name>``, sharing its options (auth, CSRF secret)."""
    from .app import DashboardApp, asgi

    class StoresDashboardApp(DashboardApp):
        """The root DashboardApp, closing the mounted stores' dashboards with its own."""

        def close_streams(self) -> None:
            super().close_streams()
            for other in mounted:
                other.close_streams()

        def close(self) -> None:
            super().close()
            for other in mounted:
                other.close()

    mounted: list[DashboardApp] = []
    for name in app.stores.names:
        if name == DEFAULT_STORE:
            continue
        inner = asgi(app.for_store(name), **options)
        inner.dashboard.mount = store_path(name)
        mounted.append(inner)
        starlette.router.routes.insert(0, Mount(store_path(name), app=inner))
    return StoresDashboardApp(starlette, dashboard)
