"""The dashboard's runtime controls in a real browser (Playwright driving Debian's
chromium; skipped, saying why, without it): a limit set, paused and reset from the
limits page while a worker runs its jobs; run now, snooze and edit the arguments of a
scheduled job; run now of ticked jobs, each after its question.

The screenshots of these controls in docs/howto/dashboard.md are taken here: into a
temporary directory, or into ``PGTASKS_SCREENSHOTS`` (``docs/img`` to refresh them).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from pgtasks import App
from pgtasks._app import controls
from pgtasks.web import asgi
from tests.support.browser import browser, needs_chromium, page
from tests.support.inprocess import DEFAULT_SETTINGS, Gates, running_worker
from tests.support.web import Served

__all__ = ["browser", "page"]
pytestmark = needs_chromium

Connection = psycopg.Connection[Any]


def shots(tmp_path: Path) -> Path:
    return Path(os.environ.get("PGTASKS_SCREENSHOTS") or tmp_path)


def limit_state(app: App, name: str) -> Any:
    return {state.name: state for state in app.admin.limits()}.get(name)


def test_a_limit_is_set_paused_and_reset_from_the_limits_page_while_jobs_run(
    app: App, serve: Callable[..., Served], page: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    gates = Gates()
    held = [gates() for _ in range(4)]

    @app.task(name="shop.export", queue="exports")  # declares no limit
    def export(n: int) -> None:
        held[n].wait(30)

    export.delay_many([{"n": n} for n in range(4)])
    served = serve(asgi(app))
    questions: list[str] = []
    page.on("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))
    row = page.locator('tr[data-limit="task:shop.export"]')
    try:
        page.goto(f"{served.url}/limits")
        page.fill('#change-limit input[name="name"]', "task:shop.export")
        page.fill('#change-limit input[name="concurrency"]', "2")
        page.click('#change-limit button:text("Set")')
        expect(page.locator(".message")).to_have_text(
            "Limit changed: every worker applies it from its next claim."
        )
        assert questions == ["Change this limit for every worker?"]
        expect(row.locator("[data-runtime]")).to_contain_text(
            "set at runtime by dashboard:anonymous@127.0.0.1"
        )
        expect(page.locator("#audit tbody tr").first).to_contain_text("concurrency=2 rate=-")

        with running_worker(app, queues=["exports"], **DEFAULT_SETTINGS):
            # Live: two run (the new limit), two are held back.
            expect(row.locator('[data-stat="running"]')).to_have_text("2 of 2")
            expect(row.locator('[data-stat="held"]')).to_have_text("2")
            page.click('#change-limit button:text("Pause")')
            expect(page.locator(".message")).to_contain_text("Limit paused")
            expect(row.locator("[data-paused]")).to_be_visible()
            held[0].set()
            held[1].set()
            expect(row.locator('[data-stat="running"]')).to_contain_text("0")
            expect(row.locator('[data-stat="held"]')).to_have_text("2")  # paused: none start
            page.screenshot(path=str(shots(tmp_path) / "dashboard-limit-change.png"))
            page.click('#change-limit button:text("Reset")')
            expect(page.locator(".message")).to_have_text(
                "Limit reset: what the app declares applies again."
            )
            gates.open_all()
            # Reset: the limit is gone, and the held jobs ran.
            expect(row).to_have_count(0)
        assert limit_state(app, "task:shop.export") is None
        assert [row["action"] for row in controls.read_audit(app)] == ["reset", "pause", "set"]
    finally:
        gates.open_all()


def test_run_now_snooze_and_edit_arguments_of_a_scheduled_job_on_its_page(
    app: App, admin: Connection, serve: Callable[..., Served], page: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    @app.task(name="shop.remind", queue="reminders")
    def remind(to: str, text: str = "hi") -> None: ...

    job = remind.apply_async(args=["ann@example.com"], countdown=3600)
    served = serve(asgi(app))
    questions: list[str] = []
    page.on("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))

    page.goto(f"{served.url}/jobs/{job.id}")
    page.click("#edit-arguments summary")
    page.fill('#edit-arguments textarea[name="kwargs"]', '{"text": "your order shipped"}')
    page.screenshot(path=str(shots(tmp_path) / "dashboard-job-actions.png"), full_page=True)
    page.click('#edit-arguments button:text("Save arguments")')
    expect(page.locator(".message")).to_have_text("Arguments saved: the job runs with them.")
    expect(page.locator("#kwargs")).to_contain_text("your order shipped")
    assert questions[0].startswith("Save these arguments?")

    # A bad edit is refused with the enqueue's reason.
    page.click("#edit-arguments summary")
    page.fill('#edit-arguments textarea[name="kwargs"]', '{"txt": 1}')
    page.click('#edit-arguments button:text("Save arguments")')
    expect(page.locator("main")).to_contain_text("arguments do not match task 'shop.remind'")

    page.goto(f"{served.url}/jobs/{job.id}")
    page.click('#snooze button:text("Snooze 1 day")')
    expect(page.locator(".message")).to_have_text(
        "Snoozed: the job starts later (no attempt spent)."
    )
    page.click("#run-now")
    expect(page.locator(".message")).to_have_text("The job is due now.")
    expect(page.locator("#run-now")).to_have_count(0)  # due now: nothing to bring forward
    row = admin.execute(
        f'SELECT run_at <= now(), attempts, kwargs FROM "{app.schema}".jobs WHERE id = %s',
        [job.id],
    ).fetchone()
    assert row == (True, 0, {"text": "your order shipped"})


def test_ticked_scheduled_jobs_are_run_now_after_the_question(
    app: App, serve: Callable[..., Served], page: Any
) -> None:
    from playwright.sync_api import expect

    @app.task(name="shop.followup", queue="later")
    def followup(n: int) -> None: ...

    jobs = [followup.apply_async(args=[n], countdown=600) for n in range(3)]
    served = serve(asgi(app))
    questions: list[str] = []
    page.on("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))
    page.goto(f"{served.url}/jobs?queue=later")
    for job in jobs[:2]:
        page.check(f'input[name="id"][value="{job.id}"]')
    button = page.locator('button[value="run_now"]')
    expect(button).to_contain_text("Run now")
    button.click()
    expect(page.locator(".message")).to_have_text(
        "Made 2 selected job(s) due now; 0 were not pending later."
    )
    assert questions == [
        "Make 2 selected job(s) due now? Pending jobs scheduled later start at once."
    ]
    audited = sorted(int(row["target"][4:]) for row in controls.read_audit(app))
    assert audited == sorted(job.id for job in jobs[:2])

    # Snooze the ticked ones, then bring every scheduled job of the filter forward.
    for job in jobs:
        page.check(f'input[name="id"][value="{job.id}"]')
    page.click("#snooze-selected")
    expect(page.locator(".message")).to_have_text("Snoozed 3 selected job(s); 0 were not pending.")
    assert questions[-1] == "Snooze 3 selected pending job(s) by 1 hour?"
    page.click("#run-now-matching")
    expect(page.locator(".message")).to_have_text("Made 3 pending job(s) scheduled later due now.")
    assert questions[-1] == (
        "Make every pending job scheduled later that this filter selects due now?"
    )


def test_a_worker_pool_is_shrunk_and_grown_from_the_workers_page_within_its_bounds(
    app: App, serve: Callable[..., Served], page: Any
) -> None:
    from playwright.sync_api import expect

    served = serve(asgi(app))
    with running_worker(app, concurrency=2) as worker:
        busy = page.locator(f'[data-pool="{worker.worker_id}"]').locator("xpath=..")
        page.goto(f"{served.url}/workers")
        expect(busy).to_contain_text("0/2")
        page.click(f'[data-pool="{worker.worker_id}"] button[title="one job slot less"]')
        expect(page.locator(".message")).to_contain_text("Pool size asked")
        expect(busy).to_contain_text("0/1")  # applied at a heartbeat, shown live
        assert worker._executor.concurrency == 1
        page.click(f'[data-pool="{worker.worker_id}"] button[title="one job slot more"]')
        expect(busy).to_contain_text("0/2")
        # Past the bounds it started with (1 to its concurrency, 2): refused, saying so.
        page.click(f'[data-pool="{worker.worker_id}"] button[title="one job slot more"]')
        expect(page.locator("main")).to_contain_text(
            "3 is beyond the bounds it started with, 1 to 2"
        )
    assert [row["action"] for row in controls.read_audit(app, prefix="worker:")] == [
        "pool_grow",
        "pool_shrink",
    ]
