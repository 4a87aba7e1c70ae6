"""The jobs list and the overview as a product: columns (args, runtime, attempts, age,
progress), status tabs with counts, links from every overview count, the bulk counts,
ticked-row actions, the favicon, and what a list of size-capped rows reads."""

from __future__ import annotations

import html as html_module
import json
import re
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pgtasks import App
from pgtasks._job_filter import JobFilter
from pgtasks.web import reads
from tests.support.inprocess import execute, select
from tests.support.population import insert_job, register
from tests.support.web import Client

Connection = psycopg.Connection[Any]


def row_of(html: str, job_id: int) -> str:
    match = re.search(rf'<tr data-job="{job_id}">(.*?)</tr>', html, re.S)
    assert match, f"job {job_id} is not listed"
    return match[1]


def cells(row: str) -> list[str]:
    texts = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    return [html_module.unescape(re.sub(r"<[^>]+>", "", text)).strip() for text in texts]


def status_of(admin: Connection, app: App, job_id: int) -> str | None:
    rows = select(admin, app, "SELECT status FROM {schema}.all_jobs WHERE id = %s", [job_id])
    return rows[0][0] if rows else None


def test_the_list_shows_args_progress_age_runtime_and_the_last_error_line(
    web: Client, app: App, admin: Connection
) -> None:
    worker = register(admin, app)
    running = insert_job(
        admin, app, status="running", task="reports.build", locked_by=worker, args='[7, "x"]'
    )
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET locked_at = now() - interval '90 seconds',"
        " created_at = now() - interval '2 minutes', attempts = 1,"
        " meta = jsonb_build_object('pgtasks.progress',"
        " jsonb_build_object('current', 30, 'total', 120)) WHERE id = %s",
        [running],
    )
    failed = insert_job(
        admin,
        app,
        status="failed",
        attempts=3,
        finished_ago=5,
        args=json.dumps([{"order": 1042, "note": "n" * 500}]),
        last_error="Traceback (most recent call last):\n  File x\nValueError: card declined\n\n",
    )
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET locked_at = finished_at - interval '2.5 seconds' WHERE id = %s",
        [failed],
    )

    page = web.get("/jobs").text
    header = re.search(r"<thead>(.*?)</thead>", page, re.S)
    assert header
    for column in ("Args", "Attempts", "Progress", "Age", "Runtime", "Last error"):
        assert f">{column}</th>" in header[1]
    running_cells = cells(row_of(page, running))
    assert '[7, "x"]' in running_cells
    assert "1/3" in running_cells
    assert "2m ago" in running_cells  # age
    assert any(text.startswith("1m3") for text in running_cells)  # running for 90 s or so
    assert '<progress max="1" value="0.25">' in row_of(page, running)
    failed_cells = cells(row_of(page, failed))
    assert "ValueError: card declined" in failed_cells  # the last line only
    assert not any("Traceback" in text for text in failed_cells)
    assert "2.5s" in failed_cells  # the last attempt's duration
    args = next(text for text in failed_cells if text.startswith('[{"note"'))
    assert args.endswith("…") and len(args) == reads.LIST_ARGS_CHARS


def test_a_list_of_size_capped_rows_reads_none_of_the_large_values(
    web: Client, app: App, admin: Connection
) -> None:
    big = "x" * 900_000
    job = insert_job(
        admin,
        app,
        status="failed",
        finished_ago=1,
        args=json.dumps([{"blob": big, "seed": 1}]),
        kwargs=json.dumps({"blob": big}),
        last_error="Traceback\n" + "y" * 60_000 + "\nRuntimeError: too big",
    )
    # Random text does not compress: the args are stored large.
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET args = jsonb_build_array((SELECT string_agg(md5(g::text), '')"
        " FROM generate_series(1, 30000) AS g)), result = to_jsonb(repeat('r', 900000))"
        " WHERE id = %s",
        [job],
    )
    rows = web.state.db.run(
        lambda conn: web.state.db.queries.list_jobs_page(
            conn,
            JobFilter(),
            before=None,
            limit=10,
            args_bytes=reads.LIST_ARGS_BYTES,
            args_chars=reads.LIST_ARGS_CHARS,
            error_chars=reads.LIST_ERROR_CHARS,
        )
    )
    (row,) = rows
    assert set(row) >= {"args_head", "error_line"}
    assert not {"args", "kwargs", "result", "last_error", "meta"} & set(row)
    assert row["args_head"] is None  # too large to render at all
    assert row["error_line"] == "RuntimeError: too big"
    page = web.get("/jobs")
    assert len(page.content) < 60_000
    shown = next(text for text in cells(row_of(page.text, job)) if text.startswith("[…"))
    assert shown.endswith(" kB]")


def test_status_tabs_count_the_queue_and_link_with_the_filter(
    web: Client, app: App, admin: Connection
) -> None:
    for _ in range(3):
        insert_job(admin, app, queue="emails")
    insert_job(admin, app, queue="emails", status="failed", finished_ago=1)
    insert_job(admin, app, queue="other", status="failed", finished_ago=1)

    page = web.get("/jobs?queue=emails").text
    tabs = re.search(r'<nav class="tabs".*?</nav>', page, re.S)
    assert tabs
    tab = dict(re.findall(r'data-tab="(\w+)"[^>]*>\w+ <span class="count">([^<]*)<', tabs[0]))
    assert tab == {
        "waiting": "0",
        "pending": "3",
        "running": "0",
        "done": "0",
        "failed": "1",
        "cancelled": "0",
    }
    assert 'href="/jobs?queue=emails&amp;status=failed"' in tabs[0]
    assert re.search(r'aria-current="page">All <span class="count">4<', tabs[0])
    # A filter the counts do not describe (a task): tabs without counts.
    assert '<span class="count">' not in web.get("/jobs?task=x").text.split("</nav>")[0]


def test_every_overview_count_links_to_its_filtered_list(
    web: Client, app: App, admin: Connection
) -> None:
    insert_job(admin, app, queue="emails")
    insert_job(admin, app, queue="emails", run_in=3600)
    insert_job(admin, app, queue="emails", status="done", finished_ago=1)
    page = web.get("/").text
    row = re.search(r'<tr data-queue="emails">(.*?)</tr>', page, re.S)
    assert row
    links = dict(re.findall(r'data-stat="(\w+)"><a href="([^"]+)"', row[1]))
    assert links == {
        "waiting": "/jobs?queue=emails&amp;status=waiting",
        "pending": "/jobs?queue=emails&amp;status=pending",
        "due": "/jobs?queue=emails&amp;status=pending&amp;due=yes",
        "running": "/jobs?queue=emails&amp;status=running",
        "done": "/jobs?queue=emails&amp;status=done",
        "failed": "/jobs?queue=emails&amp;status=failed",
        "cancelled": "/jobs?queue=emails&amp;status=cancelled",
    }
    due = web.get("/jobs?queue=emails&status=pending&due=yes").text
    assert len(re.findall(r'<tr data-job="', due)) == 1
    later = web.get("/jobs?queue=emails&due=no").text
    assert len(re.findall(r'<tr data-job="', later)) == 1


def test_bulk_counts_say_how_many_jobs_each_button_touches(
    web: Client, app: App, admin: Connection
) -> None:
    for _ in range(2):
        insert_job(admin, app, task="a", status="failed", finished_ago=1)
    insert_job(admin, app, task="a", status="cancelled", finished_ago=1)
    insert_job(admin, app, task="a")
    insert_job(admin, app, task="b", status="failed", finished_ago=1)

    # A task filter is counted (a scan, capped) ...
    assert web.get("/jobs/counts?task=a").json() == {
        "retryable": 3,
        "cancellable": 1,
        "retryable_capped": False,
        "cancellable_capped": False,
        "estimated": False,
    }
    # ... a queue or status filter read from the status counts (as the overview).
    by_queue = web.get("/jobs/counts?queue=default").json()
    assert (by_queue["retryable"], by_queue["cancellable"]) == (4, 1)
    by_status = web.get("/jobs/counts?status=failed").json()
    assert (by_status["retryable"], by_status["cancellable"]) == (3, 0)
    page = web.get("/jobs?task=a").text
    assert 'data-counts-url="/jobs/counts?task=a"' in page
    assert 'data-bulk-count="retryable"' in page
    assert "data-counts-url" not in web.get("/jobs").text  # no filter: no bulk buttons


def test_ticked_jobs_are_retried_cancelled_and_deleted_with_counts(
    web: Client, app: App, admin: Connection
) -> None:
    failed = [insert_job(admin, app, status="failed", finished_ago=1) for _ in range(2)]
    pending = insert_job(admin, app)
    done = insert_job(admin, app, status="done", finished_ago=1)

    def act(action: str, ids: list[int], **query: str) -> str:
        response = web.request(
            "POST",
            "/jobs/selected",
            data={"csrf": web.state.csrf, "action": action, "id": [str(i) for i in ids], **query},
            headers={"origin": "http://localhost:8080"},
        )
        assert response.status_code == 303, response.text
        location = response.headers["location"]
        assert location.startswith("/jobs?")
        return web.get(location).text

    message = act("retry", [*failed, pending], status="failed")
    assert "Retried 2 selected job(s); 1 could not be retried." in message
    assert [status_of(admin, app, job) for job in failed] == ["pending", "pending"]
    message = act("cancel", [*failed, done])
    assert "Cancelled 2 selected job(s)" in message and "1 had already finished" in message
    message = act("delete", [done, pending, 999_999_999])
    assert "Deleted 1 selected job(s); 2 could not be deleted." in message
    assert status_of(admin, app, done) is None
    assert status_of(admin, app, pending) == "pending"
    page = web.get("/jobs").text
    assert 'form="selection"' in page and 'id="select-all"' in page


def test_read_only_has_no_checkboxes_and_refuses_ticked_actions(
    make_client: Callable[..., Client], app: App, admin: Connection
) -> None:
    job = insert_job(admin, app, status="failed", finished_ago=1)
    web = make_client(read_only=True)
    page = web.get("/jobs").text
    assert 'type="checkbox"' not in page
    response = web.post("/jobs/selected", {"action": "retry", "id": str(job)})
    assert response.status_code == 403
    assert status_of(admin, app, job) == "failed"


def test_the_favicon_is_served_and_linked(web: Client) -> None:
    icon = web.get("/favicon.ico")
    assert icon.status_code == 200
    assert icon.headers["content-type"] == "image/x-icon"
    assert icon.content[:4] == b"\x00\x00\x01\x00"
    assert web.get("/static/favicon.svg").status_code == 200
    assert 'rel="icon" href="/static/favicon.svg"' in web.get("/").text


@pytest.mark.parametrize("path", ["/", "/jobs", "/workers", "/schedules"])
def test_controls_share_one_look(web: Client, path: str) -> None:
    page = web.get(path).text
    assert "style=" not in page  # the CSP forbids inline styles: every look is app.css
    for button in re.findall(r"<button[^>]*>", page):
        assert re.search(r'class="(action|primary)', button), button


def test_a_filter_no_index_serves_reads_a_bounded_number_of_jobs_per_page(
    web: Client, app: App, admin: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rare args value: each page reads SCAN_ROWS jobs at most and says where it
    stopped; "search older jobs" goes on from there until the oldest job."""
    monkeypatch.setattr(reads, "SCAN_ROWS", 5)
    old_match = insert_job(admin, app, args='["needle"]')
    others = [insert_job(admin, app) for _ in range(7)]
    new_match = insert_job(admin, app, args='["needle"]')

    page = web.get('/jobs?args=["needle"]').text
    assert [int(i) for i in re.findall(r'<tr data-job="(\d+)">', page)] == [new_match]
    assert 'id="searched"' in page
    link = re.search(r'href="/jobs\?([^"]+)" rel="next">search older jobs', page)
    assert link, page
    assert f"before={others[3]}" in link[1]  # the lowest id the 5-job scan read
    older = web.get("/jobs?" + html_module.unescape(link[1])).text
    assert [int(i) for i in re.findall(r'<tr data-job="(\d+)">', older)] == [old_match]
    assert 'rel="next"' not in older  # the scan reached the oldest job: nothing more
    assert 'id="searched"' not in older
    # A page full of matches pages as usual (from its last job).
    assert 'id="searched"' not in web.get("/jobs").text
