"""The dashboard in a real browser: Playwright driving Debian's chromium (never a browser
Playwright downloads). Skipped, with the reason, when chromium is not installed.

The screenshots of docs/howto/dashboard.md are taken by ``scripts/dashboard-screenshots``;
a test here takes them into a temporary directory, so that the script keeps working.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from pgtasks import App, chain, chord
from pgtasks.web import asgi
from tests.support.browser import browser, needs_chromium, page
from tests.support.dashboard_demo import SHOTS, build_scene, demo_data, take_screenshots
from tests.support.inprocess import DEFAULT_SETTINGS, Gates, running_worker
from tests.support.population import insert_job
from tests.support.waiting import wait_until
from tests.support.web import Served

__all__ = ["browser", "page"]
pytestmark = needs_chromium

Connection = psycopg.Connection[Any]


def test_overview_updates_live_and_a_failed_job_is_retried_and_runs(
    app: App,
    admin: Connection,
    serve: Callable[..., Served],
    page: Any,
) -> None:
    from playwright.sync_api import expect

    ran: list[dict[str, Any]] = []

    @app.task(name="shop.charge_card", queue="default")
    def charge_card(order: dict[str, Any]) -> str:
        ran.append(order)
        return "charged"

    @app.task(name="shop.send_receipt", queue="emails")
    def send_receipt(to: str) -> None:
        return None

    failed = demo_data(admin, app)
    served = serve(asgi(app))

    with running_worker(app, queues=["default"]):
        # The overview: the emails queue's pending count changes live on an enqueue.
        page.goto(served.url + "/")
        pending = page.locator('tr[data-queue="emails"] [data-stat="pending"]')
        expect(pending).to_have_text("4")
        expect(page.locator("#live-status")).to_have_text("live")
        send_receipt.delay("b@example.com")
        expect(pending).to_have_text("5")  # no reload: the event stream brought it

        # A failed job: open it from the jobs list, read its error, retry it.
        page.goto(served.url + "/jobs?status=failed")
        page.click(f'a[href="/jobs/{failed}"]')
        expect(page.locator("#job-status")).to_have_text("failed")
        expect(page.locator("#last-error")).to_contain_text("GatewayTimeout: no answer in 10 s")
        page.click("text=Retry")
        expect(page.locator(".message")).to_contain_text("Retried")

        # No reload: the job page follows the retried job to its end.
        expect(page.locator("#job-status")).to_have_text("done")
    assert ran == [{"order": 1042, "amount_cents": 1999}]
    expect(page.locator("#result")).to_contain_text('"charged"')


def test_bulk_retry_and_delete_ask_before_acting(
    app: App, admin: Connection, serve: Callable[..., Served], page: Any
) -> None:
    from playwright.sync_api import expect

    failed = [
        insert_job(admin, app, status="failed", task="shop.charge_card", finished_ago=60)
        for _ in range(3)
    ]
    served = serve(asgi(app))
    questions: list[str] = []

    # Declining the question leaves the job alone.
    page.once("dialog", lambda dialog: (questions.append(dialog.message), dialog.dismiss()))
    page.goto(f"{served.url}/jobs/{failed[0]}")
    page.click("text=Delete")
    expect(page.locator("#job-status")).to_have_text("failed")
    assert questions == [f"Delete job {failed[0]}? This cannot be undone."]

    # The bulk retry's button says how many jobs it touches; accepting its question
    # retries every job the filter selects.
    page.once("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))
    page.goto(f"{served.url}/jobs?status=failed&task=shop.charge_card")
    retry_all = page.locator('form[action="/jobs/bulk/retry"] button')
    expect(retry_all).to_have_text("Retry all 3 failed/cancelled matching")
    retry_all.click()
    expect(page.locator(".message")).to_have_text("Retried 3 job(s).")
    assert questions[1] == "Retry every failed or cancelled job this filter selects (3 jobs)?"
    rows = admin.execute(
        f'SELECT DISTINCT status FROM "{app.schema}".all_jobs WHERE id = ANY(%s)', [failed]
    ).fetchall()
    assert rows == [("pending",)]


def dashboard_listens(app: App) -> bool:
    """Whether the dashboard's listener has LISTENed on every channel of the app's schema
    (its session's last statement is the LISTEN on the activity channel, its last)."""
    with app.connection() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = 'pgtasks web' AND query = %s",
            [f'LISTEN "{app.queries.activity_channel}"'],
        ).fetchone()
    return bool(row and row[0])


def test_a_half_second_job_shows_as_running_on_the_overview(
    app: App, serve: Callable[..., Served], page: Any
) -> None:
    """Default settings: the claim's notification, not a poll, makes it visible. Waits on
    conditions only: the page is live, its listener LISTENs and the page shows the job
    pending before a worker (at the App's defaults) starts and claims it, so nothing but
    the claim's notification and one render stand between the claim and the page."""
    from playwright.sync_api import expect

    @app.task(queue="quick")
    def half_second() -> str:
        time.sleep(0.5)
        return "done"

    served = serve(asgi(app))
    page.goto(served.url + "/")
    expect(page.locator("#live-status")).to_have_text("live")
    wait_until(lambda: dashboard_listens(app), message="the dashboard's listener to LISTEN")
    # Every value the queue's Running cell takes, as the page shows it.
    page.evaluate(
        """() => {
            window.runningSeen = [];
            const live = document.getElementById("live");
            new MutationObserver(() => {
                const cell = live.querySelector('tr[data-queue="quick"] [data-stat="running"]');
                if (cell) { window.runningSeen.push(cell.textContent.trim()); }
            }).observe(live, {childList: true, subtree: true, characterData: true});
        }"""
    )
    handle = half_second.delay()
    # The enqueue's notification: the page shows the job pending (no worker yet).
    expect(page.locator('tr[data-queue="quick"] [data-stat="pending"]')).to_have_text("1")
    with running_worker(app, queues=["quick"], **DEFAULT_SETTINGS):
        assert handle.get(timeout=15) == "done"
        expect(page.locator('tr[data-queue="quick"] [data-stat="done"]')).to_have_text("1")
    seen = page.evaluate("window.runningSeen")
    assert "1" in seen, seen
    assert seen[-1] == "0"


def test_a_progress_bar_moves_live_on_the_job_page(
    app: App, serve: Callable[..., Served], page: Any
) -> None:
    from playwright.sync_api import expect

    gates = Gates()
    steps = [gates() for _ in range(4)]

    @app.task(queue="slow", bind=True)
    def crunch(ctx: Any) -> str:
        for index, step in enumerate(steps):
            ctx.set_progress((index + 1) * 25, 100, f"batch {index + 1} of 4")
            step.wait(30)
        return "crunched"

    served = serve(asgi(app))
    handle = crunch.delay()
    try:
        with running_worker(app, queues=["slow"], poll_interval=app.poll_interval):
            page.goto(f"{served.url}/jobs/{handle.id}")
            bar = page.locator("#progress progress")
            for index, step in enumerate(steps):
                # No reload: each report arrives over the page's event stream.
                expect(bar).to_have_attribute("value", str((index + 1) * 0.25))
                expect(page.locator("#progress")).to_contain_text(f"batch {index + 1} of 4")
                expect(page.locator("#job-status")).to_have_text("running")
                step.set()
            expect(page.locator("#job-status")).to_have_text("done")
            expect(page.locator("#result")).to_contain_text('"crunched"')
    finally:
        gates.open_all()


def test_a_workflow_graph_changes_state_live(
    app: App, serve: Callable[..., Served], page: Any
) -> None:
    """Default settings: each step's claim and finish reach the page over its event
    stream; the graph, the steps done and the state follow without a reload."""
    from playwright.sync_api import expect

    gates = Gates()
    held = {value: gates() for value in (1, 2, 3)}

    @app.task(name="shop.fetch", queue="flow")
    def fetch(value: int) -> int:
        held[value].wait(30)
        return value * 10

    @app.task(name="shop.total", queue="flow")
    def total(values: list[int]) -> int:
        return sum(values)

    served = serve(asgi(app))
    workflow = chord([fetch.s(1), fetch.s(2), fetch.s(3)], total.s()).delay()
    by_step = {job["workflow_step"]: job["id"] for job in app.get_workflow(workflow.id)["jobs"]}
    node = {step: page.locator(f'[data-job="{job}"]') for step, job in by_step.items()}
    try:
        page.goto(f"{served.url}/workflows/{workflow.id}")
        expect(page.locator("#live-status")).to_have_text("live")
        page.evaluate("window.loadedOnce = true")  # gone if the page were loaded again
        expect(node["0.0"]).to_have_attribute("data-status", "pending")
        expect(node["1"]).to_have_attribute("data-status", "waiting")
        with running_worker(app, queues=["flow"], **DEFAULT_SETTINGS):
            for step in ("0.0", "0.1", "0.2"):
                expect(node[step]).to_have_attribute("data-status", "running")
            held[2].set()
            expect(node["0.1"]).to_have_attribute("data-status", "done")
            expect(page.locator("#steps-done")).to_contain_text("1/4")
            expect(node["0.0"]).to_have_attribute("data-status", "running")
            held[1].set()
            held[3].set()
            expect(node["1"]).to_have_attribute("data-status", "done")
            expect(page.locator("#workflow-state")).to_have_text("done")
            expect(page.locator("#steps-done")).to_contain_text("4/4")
            expect(page.locator("#steps")).to_contain_text("60")
        assert workflow.get(timeout=10) == 60
        assert page.evaluate("window.loadedOnce") is True
    finally:
        gates.open_all()


def test_the_limits_page_follows_running_jobs_live(
    app: App, serve: Callable[..., Served], page: Any
) -> None:
    """Default settings: the claims and finishes of a limited task's jobs reach the limits
    page over its event stream; its running, pending and held counts follow without a
    reload."""
    from playwright.sync_api import expect

    gates = Gates()
    held = [gates() for _ in range(3)]

    @app.task(name="shop.refund", queue="refunds", concurrency=2)
    def refund(n: int) -> None:
        held[n].wait(30)

    with app.connection() as conn:  # as the worker of an earlier deploy stored them
        app.queries.upsert_limits(conn, app.limit_definitions())
    refund.delay_many([{"n": n} for n in range(3)])
    served = serve(asgi(app))
    row = page.locator('tr[data-limit="task:shop.refund"]')
    running, pending, cell_held = (
        row.locator(f'[data-stat="{stat}"]') for stat in ("running", "pending", "held")
    )
    try:
        page.goto(f"{served.url}/limits")
        expect(page.locator("#live-status")).to_have_text("live")
        page.evaluate("window.loadedOnce = true")  # gone if the page were loaded again
        expect(running).to_have_text("0 of 2")
        expect(pending).to_have_text("3")
        with running_worker(app, queues=["refunds"], **DEFAULT_SETTINGS):
            # Two claimed (the limit's capacity), the third held back.
            expect(running).to_have_text("2 of 2")
            expect(pending).to_have_text("1")
            expect(cell_held).to_have_text("1")
            held[0].set()  # one ends: the third takes its slot
            expect(pending).to_have_text("0")
            expect(cell_held).to_have_text("0")
            expect(running).to_have_text("2 of 2")
            held[1].set()
            expect(running).to_have_text("1 of 2")
            held[2].set()
            expect(running).to_have_text("0 of 2")
        assert page.evaluate("window.loadedOnce") is True
    finally:
        gates.open_all()


def test_cancel_workflow_asks_first_then_cancels_its_steps_and_the_graph_shows_it(
    app: App, admin: Connection, serve: Callable[..., Served], page: Any
) -> None:
    from playwright.sync_api import expect

    @app.task(name="shop.reserve", queue="nobody")
    def reserve(order: int) -> int: ...

    @app.task(name="shop.ship", queue="nobody")
    def ship(order: int) -> str: ...

    workflow = chain(reserve.s(7), ship.s()).delay()
    by_step = {job["workflow_step"]: job["id"] for job in app.get_workflow(workflow.id)["jobs"]}
    served = serve(asgi(app))
    questions: list[str] = []
    button = page.locator("text=Cancel workflow")

    # Declining the question leaves the workflow running.
    page.once("dialog", lambda dialog: (questions.append(dialog.message), dialog.dismiss()))
    page.goto(f"{served.url}/workflows/{workflow.id}")
    button.click()
    expect(page.locator("#workflow-state")).to_have_text("running")
    assert questions == [
        f"Cancel workflow {workflow.id}? Its waiting and pending steps will not run; its"
        " running steps are asked to stop."
    ]

    page.once("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))
    button.click()
    expect(page.locator(".message")).to_contain_text("Cancelled the workflow: 2 job(s)")
    expect(page.locator("#workflow-state")).to_have_text("cancelled")
    for job in by_step.values():
        expect(page.locator(f'#graph [data-job="{job}"]')).to_have_attribute(
            "data-status", "cancelled"
        )
    expect(button).to_have_count(0)  # nothing left to cancel
    statuses = admin.execute(
        f'SELECT DISTINCT status FROM "{app.schema}".all_jobs WHERE workflow_id = %s', [workflow.id]
    ).fetchall()
    assert statuses == [("cancelled",)]


def test_ticked_jobs_survive_live_updates_and_the_buttons_count_them(
    app: App, admin: Connection, serve: Callable[..., Served], page: Any
) -> None:
    from playwright.sync_api import expect

    failed = [
        insert_job(admin, app, status="failed", task="shop.charge_card", finished_ago=60)
        for _ in range(3)
    ]
    served = serve(asgi(app, poll=0.5))
    page.goto(f"{served.url}/jobs")
    expect(page.locator("#live-status")).to_have_text("live")
    retry = page.locator('button[name="action"][value="retry"]')
    expect(retry).to_be_disabled()
    for job in failed[:2]:
        page.check(f'input[name="id"][value="{job}"]')
    expect(retry).to_have_text("Retry selected (2)")
    # A live update re-renders the list: the ticks stay.
    updated = page.locator("#live").get_attribute("data-updated")
    insert_job(admin, app, queue="other")
    page.wait_for_function(
        "previous => document.getElementById('live').getAttribute('data-updated') !== previous",
        arg=updated,
    )
    expect(page.locator('tr[data-job] input[name="id"]')).to_have_count(4)
    for job in failed[:2]:
        expect(page.locator(f'input[name="id"][value="{job}"]')).to_be_checked()
    expect(retry).to_have_text("Retry selected (2)")
    retry.click()
    expect(page.locator(".message")).to_have_text(
        "Retried 2 selected job(s); 0 could not be retried."
    )
    statuses = admin.execute(
        f'SELECT id, status FROM "{app.schema}".all_jobs WHERE id = ANY(%s) ORDER BY id', [failed]
    ).fetchall()
    assert statuses == [(failed[0], "pending"), (failed[1], "pending"), (failed[2], "failed")]


def test_screenshots_of_every_page(
    app: App, admin: Connection, serve: Callable[..., Served], page: Any, tmp_path: Path
) -> None:
    """The pictures of docs/howto/dashboard.md, as scripts/dashboard-screenshots takes
    them (here into a temporary directory): every page renders the shop and goes live."""
    ids = build_scene(admin, app)
    served = serve(asgi(app))
    written = take_screenshots(page, served.url, ids, tmp_path)
    assert [path.name for path in written] == [f"dashboard-{name}.png" for _, name, _ in SHOTS]
    assert all(path.stat().st_size > 10_000 for path in written)


#: A phone's screen in CSS pixels (an iPhone 12 to 15 held upright).
PHONE = {"width": 390, "height": 844}


def test_every_page_fits_a_phone_screen(
    app: App, admin: Connection, serve: Callable[..., Served], browser: Any, tmp_path: Path
) -> None:
    """At 390 px wide no page scrolls sideways: wide tables and graphs scroll inside their
    own box, the header and the grids wrap. A screenshot of each is kept for a look."""
    from playwright.sync_api import expect

    ids = build_scene(admin, app)
    served = serve(asgi(app))
    context = browser.new_context(viewport=PHONE, device_scale_factor=1, is_mobile=True)
    phone = context.new_page()
    phone.set_default_timeout(15_000)
    widths = {}
    try:
        for where, name, ready in SHOTS:
            path = where.format(**ids)
            phone.goto(served.url + path)
            expect(phone.locator(ready)).to_be_visible(timeout=15_000)
            phone.screenshot(path=str(tmp_path / f"phone-{name}.png"), full_page=True)
            widths[path] = phone.evaluate("document.scrollingElement.scrollWidth")
    finally:
        context.close()
    assert all(width <= PHONE["width"] for width in widths.values()), widths


def test_a_delete_clicked_while_the_script_still_loads_is_asked_first(
    app: App, admin: Connection, serve: Callable[..., Served], page: Any
) -> None:
    """The question before a destructive action comes from the dashboard's script: the
    script is loaded before the page's body, so no button can be clicked before its
    question is in place (a deferred script left a window where the click went through)."""
    from playwright.sync_api import expect

    job = insert_job(admin, app, status="failed", task="shop.charge_card", finished_ago=60)
    served = serve(asgi(app))
    questions: list[str] = []
    page.once("dialog", lambda dialog: (questions.append(dialog.message), dialog.dismiss()))

    def slow_script(route: Any) -> None:
        time.sleep(1.0)  # a slow network for the script only: the page is parsed meanwhile
        route.continue_()

    page.route("**/static/app.js", slow_script)
    page.goto(f"{served.url}/jobs/{job}", wait_until="commit")
    page.click("text=Delete")
    expect(page.locator("#job-status")).to_have_text("failed")
    assert questions == [f"Delete job {job}? This cannot be undone."]
