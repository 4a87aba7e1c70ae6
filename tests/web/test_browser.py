"""The dashboard in a real browser: Playwright driving Debian's chromium (never a browser
Playwright downloads). Skipped, with the reason, when chromium is not installed.

With PGTASKS_WEB_SCREENSHOTS=DIR the screenshots of docs/howto/dashboard.md are written
to DIR (``PGTASKS_WEB_SCREENSHOTS=docs/img python3 dev.py test tests/web/test_browser.py``);
otherwise to the test's temporary directory.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgtasks import App
from pgtasks.web import asgi
from tests.support.inprocess import execute, running_worker
from tests.support.population import insert_job
from tests.support.waiting import wait_until
from tests.support.web import Served

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason="chromium is not installed (apt-get install -y chromium): browser tests skipped",
)

Connection = psycopg.Connection[Any]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1100, "height": 720})
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    try:
        yield opened
    finally:
        context.close()


def screenshot_dir(tmp_path: Path) -> Path:
    configured = os.environ.get("PGTASKS_WEB_SCREENSHOTS")
    directory = Path(configured) if configured else tmp_path
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def demo_data(admin: Connection, app: App) -> int:
    """Jobs of a small shop across queues, finished over the last hour; the failed job's id."""
    for minute in range(60):
        for _ in range((minute * 7) % 11 + 1):
            insert_job(
                admin,
                app,
                status="done",
                queue="emails",
                task="shop.send_receipt",
                finished_ago=minute * 60 + 5,
            )
    for _ in range(4):
        insert_job(admin, app, queue="emails", task="shop.send_receipt", args='["a@example.com"]')
    for _ in range(2):
        insert_job(admin, app, queue="reports", task="shop.nightly_report", run_in=3600)
    insert_job(admin, app, status="cancelled", queue="reports", finished_ago=900)
    failed = insert_job(
        admin,
        app,
        status="failed",
        queue="default",
        task="shop.charge_card",
        attempts=3,
        finished_ago=120,
        args='[{"order": 1042, "amount_cents": 1999}]',
        last_error=(
            "Traceback (most recent call last):\n"
            '  File "shop/tasks.py", line 31, in charge_card\n'
            "    gateway.charge(order, amount_cents)\n"
            '  File "shop/gateway.py", line 88, in charge\n'
            '    raise GatewayTimeout(f"no answer in {timeout} s")\n'
            "shop.gateway.GatewayTimeout: no answer in 10 s"
        ),
    )
    # A coherent timeline: created and due before its last attempt ended.
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET created_at = now() - interval '9 minutes',"
        " run_at = now() - interval '3 minutes', updated_at = finished_at WHERE id = %s",
        [failed],
    )
    return failed


def test_overview_updates_live_and_a_failed_job_is_retried_and_runs(
    app: App,
    admin: Connection,
    serve: Callable[..., Served],
    page: Any,
    tmp_path: Path,
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
    served = serve(asgi(app, debounce=0.2))
    shots = screenshot_dir(tmp_path)

    with running_worker(app, queues=["default"]):
        # The overview: the emails queue's pending count changes live on an enqueue.
        page.goto(served.url + "/")
        pending = page.locator('tr[data-queue="emails"] [data-stat="pending"]')
        expect(pending).to_have_text("4")
        expect(page.locator("#live-status")).to_have_text("live")
        page.screenshot(path=str(shots / "dashboard-overview.png"))
        send_receipt.delay("b@example.com")
        expect(pending).to_have_text("5")  # no reload: the event stream brought it

        # A failed job: open it from the jobs list, read its error, retry it.
        page.goto(served.url + "/jobs?status=failed")
        page.click(f'a[href="/jobs/{failed}"]')
        expect(page.locator("#job-status")).to_have_text("failed")
        expect(page.locator("#last-error")).to_contain_text("GatewayTimeout: no answer in 10 s")
        page.screenshot(path=str(shots / "dashboard-job.png"))
        page.click("text=Retry")
        expect(page.locator(".message")).to_contain_text("Retried")

        def shows_done() -> bool:
            page.reload()
            return bool(page.locator("#job-status").inner_text() == "done")

        wait_until(shows_done, timeout=15, interval=0.2, message="the retried job to run")
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

    # Accepting the bulk retry's question retries every job the filter selects.
    page.once("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))
    page.goto(f"{served.url}/jobs?status=failed&task=shop.charge_card")
    page.click("text=Retry all failed/cancelled matching")
    expect(page.locator(".message")).to_have_text("Retried 3 job(s).")
    assert len(questions) == 2
    rows = admin.execute(
        f'SELECT DISTINCT status FROM "{app.schema}".jobs WHERE id = ANY(%s)', [failed]
    ).fetchall()
    assert rows == [("pending",)]
