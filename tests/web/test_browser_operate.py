"""Operating running jobs in a real browser (Playwright driving Debian's chromium):
the job page's Terminate button and the live view of a job's log lines. Skipped, with
the reason, when chromium is not installed."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

from pgtasks import App, JobStatus
from pgtasks.web import asgi
from tests.support.browser import browser, needs_chromium, page
from tests.support.inprocess import finished, running_worker
from tests.support.waiting import wait_until
from tests.support.web import Served

__all__ = ["browser", "page"]
pytestmark = needs_chromium


def test_the_terminate_button_asks_then_stops_a_running_job(
    app: App, serve: Callable[..., Served], page: Any
) -> None:
    from playwright.sync_api import expect

    @app.task(name="ops.stuck")
    async def stuck() -> None:
        while True:  # never checks for cancellation: only a termination stops it
            await asyncio.sleep(0.05)

    served = serve(asgi(app))
    questions: list[str] = []
    with running_worker(app):
        job = stuck.delay()
        wait_until(lambda: job.status() is JobStatus.RUNNING, message="the job to run")
        page.goto(f"{served.url}/jobs/{job.id}")
        expect(page.locator("#job-status")).to_have_text("running")
        page.once("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))
        page.click("#terminate button")
        expect(page.locator(".message")).to_contain_text("Termination requested")
        expect(page.locator("#job-status")).to_have_text("cancelled")
        expect(page.locator("#last-error")).to_contain_text("Terminated:")
        expect(page.locator("#terminate")).to_have_count(0)
        assert finished(job).status is JobStatus.CANCELLED
    assert questions and "a thread cannot be killed" in questions[0]


def test_the_job_page_shows_log_lines_live_while_the_job_runs(
    app: App, serve: Callable[..., Served], page: Any
) -> None:
    from playwright.sync_api import expect

    release = threading.Event()
    log = logging.getLogger("ops.import")

    @app.task(name="ops.import_catalog")
    def import_catalog(rows: int) -> int:
        log.warning("importing %d rows <from> the feed", rows)
        release.wait(30)
        log.error("row 17 skipped: no price")
        return rows

    served = serve(asgi(app))
    with running_worker(app, heartbeat_interval=0.3):
        job = import_catalog.delay(40)
        page.goto(f"{served.url}/jobs/{job.id}")
        expect(page.locator("#live-status")).to_have_text("live")
        lines = page.locator("#job-logs td.log-text")
        # Written by the heartbeat while the job runs; the page follows without a reload.
        expect(lines).to_have_text(["importing 40 rows <from> the feed"])
        expect(page.locator("#job-status")).to_have_text("running")
        release.set()
        expect(page.locator("#job-status")).to_have_text("done")
        expect(lines).to_have_text(
            ["importing 40 rows <from> the feed", "row 17 skipped: no price"]
        )
    # The jobs list finds it by a line's text.
    page.goto(f"{served.url}/jobs?log=no+price")
    expect(page.locator(f'a[href="/jobs/{job.id}"]').first).to_be_visible()
