"""The dashboard's job page shows a job's meta, its progress and its failed attempts."""

from __future__ import annotations

import re
from typing import Any

import psycopg

from pgtasks import App
from tests.support.inprocess import execute
from tests.support.population import insert_job
from tests.support.web import Client


def test_the_job_page_shows_meta_progress_and_failed_attempts(
    app: App, web: Client, admin: psycopg.Connection[Any]
) -> None:
    @app.task(name="reports.build")
    def build() -> None: ...

    job = build.apply_async(meta={"customer": "<acme>"})
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET meta = meta || jsonb_build_object('pgtasks.progress',"
        " jsonb_build_object('current', 40, 'total', 80, 'message', 'half way')),"
        " attempt_errors = jsonb_build_array(jsonb_build_object('attempt', 1, 'worker_id', 9,"
        " 'error', 'Traceback...\nOSError: refused', 'exception_type', 'builtins.OSError',"
        " 'finished_at', now())) WHERE id = %s",
        [job.id],
    )
    response = web.get(f"/jobs/{job.id}")
    assert response.status_code == 200, response.text
    html = response.text
    assert "&#34;customer&#34;: &#34;&lt;acme&gt;&#34;" in html or "&lt;acme&gt;" in html
    assert "<acme>" not in html
    assert '<progress max="1" value="0.5">50%</progress>' in html  # a bar
    # Readable fields beside the bar, not only the JSON of meta.
    assert re.search(r'id="progress-done">40 of 80</td>', html)
    assert re.search(r"<th>Left</th><td>40</td>", html)
    assert re.search(r'id="progress-message">half way</td>', html)
    assert 'id="attempt-history"' in html
    assert "worker 9" in html
    # The exception is named once (the traceback's last line names it already).
    assert "OSError: refused" in html
    assert "builtins.OSError" not in html and "OSError: OSError" not in html


def test_progress_written_by_hand_never_breaks_the_job_page_or_the_list(
    app: App, web: Client, admin: psycopg.Connection[Any]
) -> None:
    """Numbers no float holds (a 400-digit integer, 1e400), a total of 0, a negative one,
    text: the job is shown, with the progress it can show."""
    shown = {}
    for label, progress in (
        ("huge", "jsonb_build_object('current', (10::numeric ^ 400), 'total', 3)"),
        ("exponent", "jsonb_build_object('current', 1, 'total', '1e400'::numeric)"),
        ("zero", "jsonb_build_object('current', 5, 'total', 0, 'message', '<b>m</b>')"),
        ("negative", "jsonb_build_object('current', 5, 'total', -10)"),
        ("text", "jsonb_build_object('current', 'five', 'total', 10)"),
    ):
        job = insert_job(admin, app, status="running")
        execute(
            admin,
            app,
            "UPDATE {schema}.jobs SET meta = jsonb_build_object('pgtasks.progress', "
            + progress
            + ") WHERE id = %s",
            [job],
        )
        response = web.get(f"/jobs/{job}")
        assert response.status_code == 200, (label, response.text[:500])
        assert "<b>m</b>" not in response.text
        shown[label] = re.search(r'id="progress-done">(.*?)</td>', response.text)
    listed = web.get("/jobs?status=running")
    assert listed.status_code == 200, listed.text[:500]
    assert shown["huge"] is None and shown["text"] is None  # no progress to show
    assert shown["exponent"] is not None and shown["exponent"][1] == "1"  # its total left out
    assert shown["zero"] is not None and shown["zero"][1] == "5 of 0"
    assert shown["negative"] is not None and shown["negative"][1] == "5 of -10"
