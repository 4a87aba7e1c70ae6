"""Bulk edit of arguments from the jobs list: one JSON arguments document written to the
ticked pending jobs of one task (checked as an enqueue of it), the others counted;
CSRF-checked, refused read-only, audited; in a real browser, after the question that
says how many jobs are ticked. The screenshot of the form in docs/howto/dashboard.md is
taken here: into a temporary directory, or into ``PGTASKS_SCREENSHOTS`` (``docs/img`` to
refresh it)."""

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
from tests.support.inprocess import select
from tests.support.web import Client, Served

__all__ = ["browser", "page"]

Connection = psycopg.Connection[Any]


def arguments(admin: Connection, app: App, ids: list[int]) -> list[tuple[Any, Any]]:
    return select(
        admin,
        app,
        "SELECT args, kwargs FROM {schema}.all_jobs WHERE id = ANY(%s) ORDER BY id",
        [ids],
    )


def test_ticked_pending_jobs_get_one_arguments_document_and_the_rest_are_counted(
    make_client: Callable[..., Client], app: App, admin: Connection
) -> None:
    @app.task(name="mail.digest")
    def digest(user: int, lang: str = "en") -> None: ...

    @app.task(name="mail.other")
    def other(n: int) -> None: ...

    pending = [digest.apply_async(args=[n], countdown=600) for n in range(3)]
    started = digest.apply_async(args=[9], countdown=600)
    select(
        admin,
        app,
        "UPDATE {schema}.jobs SET status = 'running' WHERE id = %s RETURNING id",
        [started.id],
    )
    ids = [str(job.id) for job in [*pending, started]]
    web = make_client()
    form: dict[str, Any] = {
        "action": "edit",
        "id": ids,
        "edit_args": "[7]",
        "edit_kwargs": '{"lang": "fr"}',
    }
    assert web.post("/jobs/selected", form, csrf=False).status_code == 403
    assert make_client(read_only=True).post("/jobs/selected", form).status_code == 403
    assert 'id="edit-selected"' not in make_client(read_only=True).get("/jobs").text
    for bad, says in [
        ({"edit_args": "[7"}, "edit_args is not JSON"),
        ({"edit_args": "{}"}, "edit_args must be an array"),
        ({"edit_kwargs": '{"nope": 1}'}, "arguments refused"),  # the task's signature
        ({"id": [*ids, str(other.delay(1).id)]}, "of 2 tasks (mail.digest, mail.other)"),
    ]:
        refused = web.post("/jobs/selected", {**form, **bad})
        assert refused.status_code == 400 and says in refused.text, refused.text
    assert controls.read_audit(app) == []

    response = web.post("/jobs/selected", form)
    assert response.status_code == 303
    assert "done=selected-edit&count=3&refused=1" in response.headers["location"]
    assert (
        "Arguments saved on 3 selected job(s); 1 were not pending"
        in web.get(response.headers["location"]).text
    )
    rows = arguments(admin, app, [job.id for job in [*pending, started]])
    assert rows == [([7], {"lang": "fr"})] * 3 + [([9], {})]
    audit = controls.read_audit(app)
    assert sorted(row["target"] for row in audit) == sorted(f"job:{job.id}" for job in pending)
    assert {row["action"] for row in audit} == {"edit_arguments"}


@needs_chromium
def test_ticked_jobs_arguments_are_edited_after_the_question_with_the_count(
    app: App, admin: Connection, serve: Callable[..., Served], page: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    @app.task(name="shop.resend", queue="later")
    def resend(order: int) -> None: ...

    jobs = [resend.apply_async(args=[n], countdown=600) for n in range(3)]
    served = serve(asgi(app))
    questions: list[str] = []
    page.on("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))
    page.goto(f"{served.url}/jobs?queue=later")
    for job in jobs[:2]:
        page.check(f'input[name="id"][value="{job.id}"]')
    page.click("#bulk-edit summary")
    page.fill('textarea[name="edit_args"]', "[42]")
    shots = Path(os.environ.get("PGTASKS_SCREENSHOTS") or tmp_path)
    page.screenshot(path=str(shots / "dashboard-bulk-edit.png"))
    page.click("#edit-selected")
    expect(page.locator(".message")).to_have_text(
        "Arguments saved on 2 selected job(s); 0 were not pending (started meanwhile, or"
        " finished): left as they were."
    )
    assert questions == [
        "Set these arguments on 2 selected job(s)? Only pending jobs of one task are edited"
        " (checked as an enqueue of it); a job that started meanwhile is left as it is."
    ]
    rows = arguments(admin, app, [job.id for job in jobs])
    assert rows == [([42], {}), ([42], {}), ([2], {})]
