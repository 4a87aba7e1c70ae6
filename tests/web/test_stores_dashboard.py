"""The dashboard of an app of two stores: the default store's at the root, the other's at
/stores/<name>, each page naming its store; a job page routes by the id's store; an
action on a job of the mounted store goes to that store."""

from __future__ import annotations

from collections.abc import Callable

from pgtasks import App
from pgtasks.web import asgi
from tests.support.web import Client


def test_each_store_has_its_dashboard_and_ids_find_theirs(
    make_stores_app: Callable[..., App],
) -> None:
    app = make_stores_app(routes={"emails": "bulk"})

    @app.task(name="dash.plain")
    def plain() -> None:
        return None

    @app.task(name="dash.mail", queue="emails")
    def mail() -> None:
        return None

    here, there = plain.delay(), mail.delay()
    dashboard = asgi(app)
    web = Client(dashboard)
    try:
        root = web.get("/")
        assert root.status_code == 200
        assert "store default" in root.text and 'href="/stores/bulk/"' in root.text
        listed = web.get("/stores/bulk/jobs")
        assert listed.status_code == 200
        assert f"/stores/bulk/jobs/{there.id}" in listed.text
        assert f'/jobs/{here.id}"' not in listed.text  # the other store's job is not there
        # A job page of the other store's id redirects to that store's dashboard.
        moved = web.get(f"/jobs/{there.id}")
        assert moved.status_code == 303
        assert moved.headers["location"] == f"/stores/bulk/jobs/{there.id}"
        page = web.get(f"/stores/bulk/jobs/{there.id}")
        assert page.status_code == 200 and "dash.mail" in page.text
        assert web.get(f"/stores/bulk/jobs/{here.id}").headers["location"] == f"/jobs/{here.id}"
        # An action goes to the store of the page it is posted to.
        cancelled = web.post(f"/stores/bulk/jobs/{there.id}/cancel")
        assert cancelled.status_code == 303
        assert app.get_job(there.id).status() == "cancelled"
        assert app.get_job(here.id).status() == "pending"
    finally:
        dashboard.close()
