"""A job's page: uniqueness (key, scope, window), limits (groups and key), the workflow a
step belongs to, documents too long to show whole, and rows written by hand."""

from __future__ import annotations

import html as html_module
import json
import re
from datetime import timedelta
from typing import Any

import psycopg

from pgtasks import App, chain
from tests.support.inprocess import execute
from tests.support.population import insert_job
from tests.support.web import Client

Connection = psycopg.Connection[Any]


def field(page: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}">(.*?)</td>', page, re.S)
    assert match, f"no field {element_id}"
    return html_module.unescape(re.sub(r"<[^>]+>", "", match[1])).strip()


def test_the_page_shows_a_unique_key_and_its_scope(web: Client, app: App) -> None:
    @app.task(name="sync", unique_while="active", unique_key=lambda n: f"sync:{n}")
    def sync(n: int) -> None: ...

    @app.task(name="digest", unique_for=timedelta(minutes=10), unique_key=lambda n: f"digest:{n}")
    def digest(n: int) -> None: ...

    plain = sync.delay(1)
    windowed = digest.delay(7)
    assert field(web.get(f"/jobs/{plain.id}").text, "unique") == (
        "sync:1 unique while active (pending or running)"
    )
    window = field(web.get(f"/jobs/{windowed.id}").text, "unique")
    assert re.fullmatch(r"digest:7 unique for the window \S+ \S+ UTC to \S+ \S+ UTC", window), (
        window
    )
    assert field(web.get(f"/jobs/{plain.id}").text, "limits") == "-"


def test_the_page_shows_limit_groups_and_the_key(web: Client, app: App) -> None:
    @app.task(name="api.call", concurrency=2, concurrency_key=lambda user: f"user-{user}")
    def call(user: int) -> None: ...

    @app.task(name="api.rated", rate_limit="10/s")
    def rated() -> None: ...

    keyed = call.delay(42)
    shown = field(web.get(f"/jobs/{keyed.id}").text, "limits")
    assert shown == "key:api.call key user-42", shown  # the limit, and the job's key
    assert "task:api.rated" in field(web.get(f"/jobs/{rated.delay().id}").text, "limits")


def test_a_steps_page_says_which_workflow_and_step_it_belongs_to(web: Client, app: App) -> None:
    @app.task(name="wf.fetch")
    def fetch(n: int) -> int:
        return n

    @app.task(name="wf.send")
    def send(n: int) -> None: ...

    handle = chain(fetch.s(1), send.s()).delay()
    jobs = app.get_workflow(handle.id)["jobs"]
    for job in jobs:
        page = web.get(f"/jobs/{job['id']}").text
        assert field(page, "workflow") == f"step {job['workflow_step']} of workflow {handle.id}"
    alone = fetch.delay(2)
    assert 'id="workflow"' not in web.get(f"/jobs/{alone.id}").text


def test_long_documents_and_errors_are_cut_on_the_server(
    web: Client, app: App, admin: Connection
) -> None:
    job = insert_job(admin, app, status="failed", finished_ago=1, args=json.dumps(["a" * 100_000]))
    error = "Traceback (most recent call last):\n" + "frame\n" * 30_000 + "ValueError: the end"
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET last_error = %s, result = %s::jsonb WHERE id = %s",
        [error, '{"ok": true}', job],
    )
    page = web.get(f"/jobs/{job}").text
    assert "the first 65,536 of 100,004 characters" in page
    assert "pgtasks jobs show" in page
    shown = html_module.unescape(re.search(r'id="last-error">(.*?)</pre>', page, re.S)[1])  # type: ignore[index]
    assert shown.startswith("Traceback (most recent call last):")
    assert shown.endswith("ValueError: the end")
    assert "characters not shown" in shown
    assert len(shown) < 66_000
    assert "&#34;ok&#34;: true" in page or "&quot;ok&quot;: true" in page
    assert len(page) < 200_000


def test_a_row_written_by_hand_reads_without_error(
    web: Client, app: App, admin: Connection
) -> None:
    job = insert_job(admin, app, status="failed", finished_ago=1)
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET attempt_errors = %s::jsonb, run_at = 'infinity',"
        " meta = jsonb_build_object('pgtasks.progress', 'nonsense'),"
        " result = '123456789012345678901234567890123456789012345678901234567890'::jsonb"
        " WHERE id = %s",
        [
            '[1, "x", {"attempt": "one", "error": 7}, {"attempt": 2, "error": "a\\nOSError: b"}]',
            job,
        ],
    )
    page = web.get(f"/jobs/{job}")
    assert page.status_code == 200, page.text
    assert "OSError: b" in page.text
    assert web.get("/jobs").status_code == 200  # run_at = infinity in the list too
    scalar = insert_job(admin, app, status="failed", finished_ago=1)
    execute(admin, app, "UPDATE {schema}.jobs SET attempt_errors = '\"x\"' WHERE id = %s", [scalar])
    assert web.get(f"/jobs/{scalar}").status_code == 200
