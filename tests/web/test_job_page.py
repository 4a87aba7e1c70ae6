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

    @app.task(name="plain")
    def plain() -> None: ...

    active = web.get(f"/jobs/{sync.delay(1).id}").text
    assert field(active, "unique") == "sync:1"
    assert field(active, "unique-scope") == (
        'while active (unique_while="active": no other pending or running job has this key)'
    )
    windowed = web.get(f"/jobs/{digest.delay(7).id}").text
    assert field(windowed, "unique") == "digest:7"
    scope = field(windowed, "unique-scope")
    assert re.fullmatch(
        r"for 10m \(unique_for=: one job with this key in the window \S+ \S+ UTC to \S+ \S+"
        r" UTC\)",
        scope,
    ), scope
    alone = web.get(f"/jobs/{plain.delay().id}").text
    assert field(alone, "unique") == "-" and 'id="unique-scope"' not in alone
    assert field(alone, "limits") == "-" and field(alone, "concurrency-key") == "-"


def test_the_page_shows_limit_groups_and_the_concurrency_key(web: Client, app: App) -> None:
    app.queue("api", concurrency=5)

    @app.task(
        name="api.call", queue="api", concurrency=2, concurrency_key=lambda user: f"user-{user}"
    )
    def call(user: int) -> None: ...

    @app.task(name="api.rated", rate_limit="10/s")
    def rated() -> None: ...

    page = web.get(f"/jobs/{call.delay(42).id}").text
    assert field(page, "limits") == "key:api.call, queue:api"
    assert field(page, "concurrency-key") == "user-42 (key:api.call limits its jobs per key)"
    # Each limit links to its row on the limits page.
    assert 'href="/limits?name=key%3Aapi.call"' in page
    assert 'href="/limits?name=queue%3Aapi"' in page
    rated_page = web.get(f"/jobs/{rated.delay().id}").text
    assert field(rated_page, "limits") == "task:api.rated"
    assert field(rated_page, "concurrency-key") == "-"


def test_hostile_limit_and_unique_values_render_cut_and_escaped(
    web: Client, app: App, admin: Connection
) -> None:
    job = insert_job(admin, app)
    execute(admin, app, f"ALTER TABLE {app.schema}.jobs DROP CONSTRAINT jobs_limit_groups_check")
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET limit_groups = ARRAY['task:<i>x</i>', NULL, 'key:k' || chr(31)"
        " || 'a'] || array_fill('queue:q'::text, ARRAY[50000]), limit_key = repeat('k', 5000)"
        " || chr(7) || '<b>', unique_key = '<script>u</script>' || chr(27) WHERE id = %s",
        [job],
    )
    response = web.get(f"/jobs/{job}")
    assert response.status_code == 200, response.text
    page = response.text
    assert "<i>x</i>" not in page and "<script>u" not in page and "<b>" not in page
    assert field(page, "unique") == "<script>u</script>\\x1b"
    limits = field(page, "limits")
    assert limits.startswith("task:<i>x</i>, key:k, queue:q and 49,983 more"), limits
    assert "⚠ 50,003 limit instances: no worker claims a job under more than 8" in limits
    key = field(page, "concurrency-key")
    assert key.startswith("k" * 200 + "…"), key[:300]
    assert len(page) < 60_000


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


def test_a_row_nested_past_the_bound_renders_on_the_list_and_its_page(
    web: Client, app: App, admin: Connection
) -> None:
    """JSON nested 3,000 deep (written by SQL) in args, result and meta: the list and the
    job's page answer 200 and show the text as stored, cut, instead of failing."""
    deep = "[" * 3000 + "]" * 3000
    job = insert_job(admin, app, task="ops.deep", args=deep)
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET result = %s::jsonb, meta = %s::jsonb WHERE id = %s",
        [deep, '{"m": ' + deep + "}", job],
    )
    listed = web.get("/jobs")
    assert listed.status_code == 200 and "ops.deep" in listed.text
    page = web.get(f"/jobs/{job}")
    assert page.status_code == 200, page.text[:500]
    assert "ops.deep" in page.text and "[[[[" in page.text
