"""The overview's pause/resume buttons (migration 0007): POSTs with the CSRF token, hidden
and refused on a read-only dashboard."""

from __future__ import annotations

import re
from collections.abc import Callable

from pgtasks import App
from tests.support.web import Client


def queue_row(page: str, queue: str) -> str:
    match = re.search(rf'<tr data-queue="{re.escape(queue)}">(.*?)</tr>', page, re.S)
    assert match, f"no row for queue {queue!r}"
    return match.group(1)


def test_the_overview_pauses_and_resumes_a_queue(web: Client, app: App) -> None:
    @app.task(queue="emails")
    def send() -> None:
        return None

    send.delay()
    row = queue_row(web.get("/").text, "emails")
    assert "active" in row
    assert 'action="/queues/pause"' in row and 'name="queue" value="emails"' in row

    response = web.post("/queues/pause", {"queue": "emails"})
    assert response.status_code == 303
    assert response.headers["location"] == "/?done=paused"
    assert app.paused_queues() == ["emails"]
    page = web.get("/?done=paused").text
    assert "Paused: workers claim none of its jobs" in page
    row = queue_row(page, "emails")
    assert "state-paused" in row and 'action="/queues/resume"' in row

    assert web.post("/queues/resume", {"queue": "emails"}).status_code == 303
    assert app.paused_queues() == []


def test_a_paused_queue_without_jobs_is_listed_with_its_resume_button(
    web: Client, app: App
) -> None:
    app.pause_queue("quiet")
    row = queue_row(web.get("/").text, "quiet")
    assert "state-paused" in row and 'action="/queues/resume"' in row


def test_queue_actions_need_the_token_a_queue_and_a_known_action(web: Client, app: App) -> None:
    assert web.post("/queues/pause", {"queue": "emails"}, csrf=False).status_code == 403
    assert (
        web.post("/queues/pause", {"queue": "emails"}, origin="https://evil.example").status_code
        == 403
    )
    assert web.post("/queues/pause", {}).status_code == 400
    assert web.post("/queues/pause", {"queue": " "}).status_code == 400
    assert web.post("/queues/drop", {"queue": "emails"}).status_code == 404
    assert app.paused_queues() == []


def test_read_only_hides_and_refuses_the_queue_actions(
    make_client: Callable[..., Client], app: App
) -> None:
    @app.task(queue="emails")
    def send() -> None:
        return None

    send.delay()
    web = make_client(read_only=True)
    row = queue_row(web.get("/").text, "emails")
    assert "<form" not in row and "<button" not in row
    assert web.post("/queues/pause", {"queue": "emails"}).status_code == 403
    assert app.paused_queues() == []
