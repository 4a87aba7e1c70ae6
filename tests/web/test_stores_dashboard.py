"""The dashboard of an app of two stores: the default store's at the root, the other's at
/stores/<name>, each page naming its store; a job or workflow page routes by the id's
store; an action on a job or workflow of the mounted store goes to that store; /stores
shows every store at once, a store that is down as down."""

from __future__ import annotations

from collections.abc import Callable

from pgtasks import App, chain
from pgtasks.web import asgi
from pgtasks.web.limit_pages import LimitsQuery
from tests.support.schemas import SchemaAdmin
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


def test_workflow_pages_of_each_store_and_ids_find_theirs(
    make_stores_app: Callable[..., App],
) -> None:
    app = make_stores_app(routes={"emails": "bulk"})

    @app.task(name="dash.plain")
    def plain(n: int) -> int:
        return n

    @app.task(name="dash.mail", queue="emails")
    def mail(n: int) -> int:
        return n

    here = chain(plain.s(1), plain.s()).delay().id
    there = chain(mail.s(1), mail.s()).delay().id
    assert here >> 48 == 0 and there >> 48 == 1
    dashboard = asgi(app)
    web = Client(dashboard)
    try:
        root = web.get("/workflows")
        assert root.status_code == 200
        assert f'data-workflow="{here}"' in root.text
        assert f'data-workflow="{there}"' not in root.text
        listed = web.get("/stores/bulk/workflows")
        assert listed.status_code == 200 and "store bulk" in listed.text
        assert f'data-workflow="{there}"' in listed.text
        assert f'data-workflow="{here}"' not in listed.text
        assert f'href="/stores/bulk/workflows/{there}"' in listed.text
        # A workflow id names its store: its page, or a search for it, redirects there.
        moved = web.get(f"/workflows/{there}")
        assert moved.status_code == 303
        assert moved.headers["location"] == f"/stores/bulk/workflows/{there}"
        back = web.get(f"/stores/bulk/workflows/{here}")
        assert back.status_code == 303 and back.headers["location"] == f"/workflows/{here}"
        searched = web.get(f"/workflows?id={there}")
        assert searched.status_code == 303
        assert searched.headers["location"] == f"/stores/bulk/workflows?id={there}"
        found = web.get(f"/stores/bulk/workflows?id={there}")
        assert found.status_code == 200 and f'data-workflow="{there}"' in found.text
        page = web.get(f"/stores/bulk/workflows/{there}")
        assert page.status_code == 200 and "dash.mail" in page.text
        first = app.get_workflow(there)["jobs"][0]["id"]
        job = web.get(f"/stores/bulk/jobs/{first}")
        assert f'href="/stores/bulk/workflows/{there}"' in job.text
        # Cancel workflow goes to the store of the page it is posted to.
        cancelled = web.post(f"/stores/bulk/workflows/{there}/cancel")
        assert cancelled.status_code == 303
        assert cancelled.headers["location"].startswith(f"/stores/bulk/workflows/{there}?")
        assert {job["status"] for job in app.get_workflow(there)["jobs"]} == {"cancelled"}
        assert {job["status"] for job in app.get_workflow(here)["jobs"]} == {"pending", "waiting"}
    finally:
        dashboard.close()
    alone = asgi(app.for_store("bulk"))  # that store alone: no other store's pages
    web = Client(alone)
    try:
        assert web.get(f"/workflows/{there}").status_code == 200
        assert web.get(f"/workflows/{here}").status_code == 404
        searched = web.get(f"/workflows?id={here}")
        assert searched.status_code == 200 and f'data-workflow="{here}"' not in searched.text
    finally:
        alone.close()


def test_limits_pages_of_each_store_show_that_stores_limits(
    make_stores_app: Callable[..., App],
) -> None:
    app = make_stores_app(routes={"emails": "bulk"})

    @app.task(name="dash.plain", concurrency=3)
    def plain() -> None:
        return None

    @app.task(name="dash.mail", queue="emails", concurrency=2)
    def mail() -> None:
        return None

    for name in ("default", "bulk"):  # what each store's worker does when it starts
        store = app.for_store(name)
        with store.connection() as conn:
            store.queries.upsert_limits(conn, store.limit_definitions())
    plain.delay()
    for _ in range(3):
        mail.delay()
    dashboard = asgi(app)
    web = Client(dashboard)
    try:
        root = web.get("/limits")
        assert root.status_code == 200 and "store default" in root.text
        assert 'data-limit="task:dash.plain"' in root.text
        assert 'data-limit="task:dash.mail"' not in root.text
        bulk = web.get("/stores/bulk/limits")
        assert bulk.status_code == 200 and "store bulk" in bulk.text
        assert 'data-limit="task:dash.mail"' in bulk.text
        assert 'data-limit="task:dash.plain"' not in bulk.text
        # Each store's limit is its own app's declaration (not marked as another app's),
        # its pending jobs linked in that store's jobs list.
        assert "data-mark" not in root.text and "data-mark" not in bulk.text
        assert 'href="/stores/bulk/jobs?task=dash.mail&amp;status=pending">3<' in bulk.text
        # The live part the bulk store's stream pushes reads that store too.
        mounted = dashboard.dashboard.mounted[0].dashboard
        context = mounted.limit_pages.limits_context(LimitsQuery())
        live = mounted.fragment("_limits_live.html", "/stores/bulk", **context)
        assert 'data-limit="task:dash.mail"' in live and "task:dash.plain" not in live
    finally:
        dashboard.close()


def test_the_dashboard_of_one_store_of_several_names_it_and_links_nowhere(
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
    dashboard = asgi(app.for_store("bulk"))  # that store alone, at the root
    web = Client(dashboard)
    try:
        root = web.get("/")
        assert root.status_code == 200 and "store bulk" in root.text
        assert 'aria-label="stores"' not in root.text and "all stores" not in root.text
        assert web.get(f"/jobs/{there.id}").status_code == 200
        assert web.get(f"/jobs/{here.id}").status_code == 404  # not served here: no redirect
        assert web.get("/stores").status_code == 404
    finally:
        dashboard.close()


def test_the_page_of_every_store_labels_each_store_and_its_queues(
    make_stores_app: Callable[..., App],
) -> None:
    app = make_stores_app(routes={"emails": "bulk"})

    @app.task(name="dash.plain")
    def plain() -> None:
        return None

    @app.task(name="dash.mail", queue="emails")
    def mail() -> None:
        return None

    plain.delay()
    for _ in range(3):
        mail.delay()
    app.pause_queue("emails")
    dashboard = asgi(app)
    web = Client(dashboard)
    try:
        page = web.get("/stores")
        assert page.status_code == 200, page.text
        default, bulk = store_sections(page.text)
        assert 'data-state="up"' in default and 'data-state="up"' in bulk
        assert f"schema {app.schemas['default']}" in default  # type: ignore[attr-defined]
        assert f"schema {app.schemas['bulk']}" in bulk  # type: ignore[attr-defined]
        # Each store's own queues and counts, linked to that store's dashboard.
        assert 'data-queue="default"' in default and 'data-queue="emails"' not in default
        assert 'href="/jobs?queue=default&amp;status=pending">1<' in default
        assert 'href="/stores/bulk/jobs?queue=emails&amp;status=pending">3<' in bulk
        assert "state-paused" in bulk and "state-paused" not in default
        # Linked from every page's store links; /stores/ goes to /stores.
        assert 'href="/stores">all stores<' in web.get("/").text
        assert 'href="/stores">all stores<' in web.get("/stores/bulk/").text
        slashed = web.get("/stores/")
        assert slashed.status_code == 308 and slashed.headers["location"] == "/stores"
    finally:
        dashboard.close()


def test_a_store_that_is_down_is_shown_down_and_the_others_answer(
    make_stores_app: Callable[..., App], schema_admin: SchemaAdmin
) -> None:
    app = make_stores_app(
        dsns={"bulk": "postgresql://pgtasks@127.0.0.1:1/nowhere"},
        migrate=False,
        connect_attempts=1,
        connect_timeout=1.0,
    )
    schema_admin.create_migrated(app.schemas["default"])  # type: ignore[attr-defined]

    @app.task(name="dash.plain")
    def plain() -> None:
        return None

    plain.delay()
    dashboard = asgi(app)
    web = Client(dashboard)
    try:
        page = web.get("/stores")
        assert page.status_code == 200, page.text
        default, bulk = store_sections(page.text)
        assert 'data-state="up"' in default
        assert 'href="/jobs?queue=default&amp;status=pending">1<' in default
        assert 'data-state="down"' in bulk and "state-down" in bulk
        assert "cannot reach PostgreSQL at 127.0.0.1:1" in bulk
        assert 'href="/stores/bulk/"' in bulk
        # The down store's own pages are its error page, not a 500; the root still answers.
        assert web.get("/stores/bulk/").status_code == 503
        assert web.get("/").status_code == 200
    finally:
        dashboard.close()


def store_sections(html: str) -> list[str]:
    """The page's section of each store, in order (default, bulk)."""
    sections = html.split('<tbody data-store="')[1:]
    assert [section.split('"', 1)[0] for section in sections] == ["default", "bulk"]
    return [section.split("</tbody>", 1)[0] for section in sections]
