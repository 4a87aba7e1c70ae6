"""The dashboard's job page shows a job's meta, its progress and its failed attempts."""

from __future__ import annotations

from typing import Any

import psycopg

from pgtasks import App
from tests.support.inprocess import execute
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
    assert "40 of 80 · half way" in html
    assert 'id="attempt-history"' in html
    assert "worker 9" in html
    # The exception is named once (the traceback's last line names it already).
    assert "OSError: refused" in html
    assert "builtins.OSError" not in html and "OSError: OSError" not in html
