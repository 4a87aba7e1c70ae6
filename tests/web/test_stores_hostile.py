"""Hostile text on the pages of a store mounted at /stores/<name> (and on /stores): rows
written with SQL, as an attacker with write access to one store's tables (or a task that
names its own errors) could, hold markup, control characters and megabytes. Every page
answers 200 with the text escaped, control characters shown as escapes, and the huge error
cut."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from pgtasks import App, chain
from pgtasks.web import asgi
from tests.support.web import Client

MARKUP = ("<script>", "<img src=x", "<b>bold", "<i>key", "<svg onload")
CONTROL = ("\x01", "\x07", "\x1b", "\x9b")


def execute(dsn: str, schema: str, statement: str, params: Any = ()) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(statement).format(schema=sql.Identifier(schema)), params)


def test_hostile_rows_of_a_mounted_store_render_escaped_on_every_page(
    make_stores_app: Callable[..., App], dsn: str
) -> None:
    app = make_stores_app(routes={"emails": "bulk"})
    bulk = app.schemas["bulk"]  # type: ignore[attr-defined]

    @app.task(name="hostile.mail", queue="emails")
    def mail(n: int) -> int:
        return n

    job = mail.delay(1).id
    workflow = chain(mail.s(1), mail.s()).delay()
    execute(
        dsn,
        bulk,
        "UPDATE {schema}.jobs SET task_name = '<script>t</script>' || chr(7),"
        " queue = '<img src=x onerror=alert(1)>' || chr(27), status = 'failed',"
        " finished_at = now(), last_error = '<script>e</script>' || chr(155)"
        " || repeat('x', 2000000), kwargs = %s::jsonb, result = %s::jsonb,"
        " idempotency_key = '<i>key</i>' || chr(1) WHERE id = %s",
        ('{"<b>bold</b>": "<svg onload=alert(1)>\\u0001"}', '"<script>r</script>"', job),
    )
    execute(
        dsn,
        bulk,
        "UPDATE {schema}.jobs SET task_name = '<svg onload=alert(2)>' || chr(7)"
        " WHERE workflow_id = %s",
        (workflow.id,),
    )
    execute(
        dsn,
        bulk,
        "INSERT INTO {schema}.workers (hostname, pid, queues, concurrency)"
        " VALUES ('<script>h</script>' || chr(27), 1, ARRAY['<b>bold</b>'], 1)",
    )
    execute(dsn, bulk, "INSERT INTO {schema}.queue_pauses (queue) VALUES ('<i>key</i>' || chr(1))")
    execute(
        dsn,
        bulk,
        "INSERT INTO {schema}.periodic (name, processed_until)"
        " VALUES ('<script>s</script>' || chr(7), now())",
    )
    dashboard = asgi(app)
    web = Client(dashboard)
    pages = [
        "/stores",
        "/stores/bulk/",
        "/stores/bulk/jobs",
        "/stores/bulk/jobs?status=failed",
        "/stores/bulk/jobs?queue=%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E%1B",
        "/stores/bulk/jobs?task=%3Cscript%3Et%3C%2Fscript%3E%07",
        f"/stores/bulk/jobs/{job}",
        "/stores/bulk/workflows",
        f"/stores/bulk/workflows/{workflow.id}",
        "/stores/bulk/workers",
        "/stores/bulk/schedules",
        "/stores/bulk/limits",
    ]
    problems: list[tuple[str, str, str]] = []
    try:
        for path in pages:
            response = web.get(path)
            assert response.status_code == 200, (path, response.status_code, response.text[:500])
            page = response.text
            for marker in (*MARKUP, *CONTROL):
                if marker in page:
                    problems.append((path, repr(marker), excerpt(page, marker)))
            if len(page) >= 500_000:
                problems.append((path, "size", str(len(page))))
        assert not problems, "\n".join(map(repr, problems))
        job_page = web.get(f"/stores/bulk/jobs/{job}").text
        assert "&lt;script&gt;t&lt;/script&gt;" in job_page
        assert "&lt;script&gt;e&lt;/script&gt;" in job_page
    finally:
        dashboard.close()


def excerpt(page: str, marker: str) -> str:
    at = page.find(marker)
    return page[max(0, at - 150) : at + 100]
