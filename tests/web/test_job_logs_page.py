"""A job's captured log lines on its page (escaped, capped, hostile rows survive) and the
jobs list's "Log has" filter."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from pgtasks import App
from tests.support.inprocess import execute
from tests.support.population import insert_job
from tests.support.web import Client


def set_logs(admin: psycopg.Connection[Any], app: App, job_id: int, logs: Any) -> None:
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET meta = meta || jsonb_build_object('pgtasks.logs', %s::jsonb)"
        " WHERE id = %s",
        [json.dumps(logs), job_id],
    )


def test_the_job_page_shows_each_attempt_lines_escaped_and_apart_from_meta(
    app: App, web: Client, admin: psycopg.Connection[Any]
) -> None:
    job = insert_job(admin, app, status="pending", attempts=2)
    at = "2026-01-01T00:00:00.000+00:00"
    set_logs(
        admin,
        app,
        job,
        {
            "1": {"lines": [[at, "ERROR", "shop", "card <b>declined</b>"]], "dropped": 0},
            "2": {"lines": [[at, "WARNING", "shop", "retrying"]], "dropped": 12},
        },
    )
    html = web.get(f"/jobs/{job}").text

    assert 'id="job-logs"' in html
    assert "card &lt;b&gt;declined&lt;/b&gt;" in html and "<b>declined" not in html
    assert html.index('data-attempt="2"') < html.index('data-attempt="1"'), "newest first"
    assert "12 more line(s) not kept" in html
    meta_pane = html[html.index('<pre id="meta">') :]
    assert "retrying" not in meta_pane, "the lines are not repeated in the meta document"


def test_hand_written_log_values_do_not_break_the_page(
    app: App, web: Client, admin: psycopg.Connection[Any]
) -> None:
    for logs in (
        [1, 2],
        "text",
        {"x": {"lines": []}, "1": "no", "2": {"lines": [1, [1, 2], [None, 5, {}, "kept"]]}},
        {"1": {"lines": [["t", "INFO", "n", "ok"]], "dropped": "many"}},
    ):
        job = insert_job(admin, app)
        set_logs(admin, app, job, logs)
        response = web.get(f"/jobs/{job}")
        assert response.status_code == 200, (logs, response.text)
    assert "kept" in web.get(f"/jobs/{job - 1}").text


def test_the_jobs_list_filters_on_text_of_the_log_lines(
    app: App, web: Client, admin: psycopg.Connection[Any]
) -> None:
    at = "2026-01-01T00:00:00.000+00:00"
    declined = insert_job(admin, app, status="failed", finished_ago=5, task="shop.charge")
    other = insert_job(admin, app, status="failed", finished_ago=5, task="shop.charge")
    percent = insert_job(admin, app, status="done", finished_ago=5, task="shop.report")
    set_logs(admin, app, declined, {"1": {"lines": [[at, "ERROR", "shop", "Card DECLINED"]]}})
    set_logs(admin, app, other, {"1": {"lines": [[at, "INFO", "shop", "charged"]]}})
    set_logs(admin, app, percent, {"1": {"lines": [[at, "INFO", "r", 'done: 100% "ok"']]}})

    def listed(log: str) -> set[int]:
        html = web.get("/jobs", params={"log": log}).text
        return {job for job in (declined, other, percent) if f'href="/jobs/{job}"' in html}

    assert listed("card declined") == {declined}
    assert listed("charge") == {other}
    assert listed('100% "ok"') == {percent}
    assert listed("0%") == {percent}
    assert listed("_") == set()
