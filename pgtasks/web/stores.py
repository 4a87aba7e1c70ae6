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


def store_names(app: App) -> list[str]:
    """The stores of ``app`` other than the default one (each mounted at its path)."""
    return [name for name in app.stores.names if name != DEFAULT_STORE]


def mount_stores(starlette: Starlette, mounted: dict[str, Any]) -> None:
    """Mount each other store's dashboard (a DashboardApp, by store name) at
    ``/stores/<name>`` in the root's routes."""
    for name, inner in mounted.items():
        inner.dashboard.mount = store_path(name)
        starlette.router.routes.insert(0, Mount(store_path(name), app=inner))
