"""The dashboard's routes through httpx's ASGI transport, on a real PostgreSQL: pages,
filters, actions, authentication, CSRF, escaping and bad input.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from pgtasks import App
from pgtasks.web import app as web_app
from pgtasks.web import asgi, basic_auth, is_loopback, reads
from tests.support.inprocess import select
from tests.support.population import insert_job, register
from tests.support.web import BASE_URL, REMOTE, Client

Connection = psycopg.Connection[Any]


def status_of(admin: Connection, app: App, job_id: int) -> str | None:
    rows = select(admin, app, "SELECT status FROM {schema}.all_jobs WHERE id = %s", [job_id])
    return rows[0][0] if rows else None


def listed_ids(html: str) -> list[int]:
    return [int(match) for match in re.findall(r'<tr data-job="(\d+)">', html)]


def queue_row(html: str, queue: str) -> dict[str, str]:
    """The overview's numbers of one queue (``data-stat`` cells), as text."""
    row = re.search(rf'<tr data-queue="{re.escape(queue)}">(.*?)</tr>', html, re.S)
    assert row, f"no row for queue {queue!r}"
    cells = re.findall(r'data-stat="(\w+)">(.*?)</td>', row[1], re.S)
    return {name: re.sub(r"<[^>]+>", "", value) for name, value in cells}


@pytest.fixture
def population(app: App, admin: Connection) -> dict[str, int]:
    """One job in each status across two queues, and a live worker holding the running one."""
    worker = register(admin, app)
    return {
        "pending": insert_job(admin, app, queue="emails", task="mail.send", args='["a@x.org"]'),
        "scheduled": insert_job(admin, app, queue="emails", task="mail.send", run_in=3600),
        "running": insert_job(admin, app, status="running", queue="emails", locked_by=worker),
        "done": insert_job(admin, app, status="done", queue="reports", finished_ago=60),
        "failed": insert_job(
            admin,
            app,
            status="failed",
            queue="reports",
            task="reports.build",
            attempts=3,
            finished_ago=30,
            last_error="Traceback (most recent call last):\nValueError: boom",
            args='[{"user": 7}, 42]',
        ),
        "cancelled": insert_job(admin, app, status="cancelled", queue="reports", finished_ago=10),
        "worker": worker,
    }


# -- pages ----------------------------------------------------------------------------------------
def test_every_page_renders(web: Client, population: dict[str, int]) -> None:
    for path in ("/", "/jobs", f"/jobs/{population['failed']}", "/workers", "/schedules"):
        response = web.get(path)
        assert response.status_code == 200, (path, response.text)
        assert response.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in response.headers["content-security-policy"]
        assert response.headers["x-frame-options"] == "DENY"
    assert web.get("/static/htmx.min.js").text.startswith("/*! htmx 2.0.11")


def test_overview_counts_each_queue_by_status(web: Client, population: dict[str, int]) -> None:
    html = web.get("/").text

    assert queue_row(html, "emails") == {
        "waiting": "0",
        "pending": "2",
        "due": "1",
        "running": "1",
        "done": "0",
        "failed": "0",
        "cancelled": "0",
    }
    assert queue_row(html, "reports") == {
        "waiting": "0",
        "pending": "0",
        "due": "0",
        "running": "0",
        "done": "1",
        "failed": "1",
        "cancelled": "1",
    }
    assert "≈" not in html  # a small table is counted exactly
    # The per-minute charts: one per queue with finished jobs, done/failed/cancelled bars.
    chart = re.search(r'data-chart-queue="reports">(.*?)</figure>', html, re.S)
    assert chart, html
    assert "1 done · 1 failed · 1 cancelled" in chart[1]
    for status in ("done", "failed", "cancelled"):
        assert f'class="bar bar-{status}"' in chart[1]
    assert 'data-chart-queue="emails"' not in html  # nothing finished there
    assert "live" in html and "host:1" in html  # the registered worker


def test_overview_estimates_finished_jobs_of_a_large_table_from_statistics(
    web: Client, app: App, admin: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(30):
        insert_job(admin, app, status="done", queue="bulk", finished_ago=7200)
    for _ in range(10):
        insert_job(admin, app, status="failed", queue="bulk", finished_ago=7200)
    insert_job(admin, app, queue="bulk")
    admin.execute(f'ANALYZE "{app.schema}".jobs')
    monkeypatch.setattr(reads, "EXACT_COUNT_LIMIT", 10)

    overview = reads.overview(app, web.state.db)
    html = web.get("/").text

    assert overview.counts.estimated
    (bulk,) = overview.queues
    # ANALYZE sampled every row of this small table: the estimates are exact here.
    assert (bulk.done, bulk.failed, bulk.pending) == (30, 10, 1)
    assert queue_row(html, "bulk")["done"] == "≈30"
    assert "estimates" in html


def test_overview_estimates_finished_jobs_in_history_from_its_statistics(
    web: Client, app: App, admin: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(30):
        insert_job(admin, app, status="done", queue="bulk", finished_ago=7200)
    for _ in range(10):
        insert_job(admin, app, status="failed", queue="bulk", finished_ago=7200)
    insert_job(admin, app, queue="bulk")
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        # As the pruner moves finished jobs an older version left in jobs.
        assert app.queries.archive_finished_jobs(conn, limit=1000) == 40
    admin.execute(f'ANALYZE "{app.schema}".jobs')
    admin.execute(f'ANALYZE "{app.schema}".jobs_history')
    monkeypatch.setattr(reads, "EXACT_COUNT_LIMIT", 10)

    overview = reads.overview(app, web.state.db)

    assert overview.counts.estimated
    (bulk,) = overview.queues
    assert (bulk.done, bulk.failed, bulk.pending) == (30, 10, 1)


def test_finished_counts_of_a_large_table_not_yet_analyzed_are_unknown_not_counted(
    web: Client, app: App, admin: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(20):
        insert_job(admin, app, status="done", queue="bulk", finished_ago=7200)
    insert_job(admin, app, queue="bulk")
    # VACUUM sets the row count; only ANALYZE builds the (queue, status) statistics.
    admin.execute(f'VACUUM "{app.schema}".jobs')
    monkeypatch.setattr(reads, "EXACT_COUNT_LIMIT", 10)

    overview = reads.overview(app, web.state.db)
    html = web.get("/").text

    assert overview.counts.unanalyzed
    assert queue_row(html, "bulk") == {
        "waiting": "0",
        "pending": "1",
        "due": "1",
        "running": "0",
        "done": "?",
        "failed": "?",
        "cancelled": "?",
    }
    assert "until the next ANALYZE" in html


def test_workers_and_schedules_pages(web: Client, app: App, population: dict[str, int]) -> None:
    workers = web.get("/workers").text
    assert f"<td>{population['worker']}</td>" in workers
    assert f'/jobs/{population["running"]}"' in workers
    assert "state-live" in workers

    @app.task
    def rollup() -> None:
        return None

    app.add_periodic(rollup, cron="*/5 * * * *", name="rollup-every-5")
    schedules = web.get("/schedules").text
    assert "rollup-every-5" in schedules
    assert "*/5 * * * *" in schedules
    assert "UTC" in schedules


def test_job_detail_shows_arguments_error_attempts_lease_and_timeline(
    web: Client, population: dict[str, int]
) -> None:
    failed = web.get(f"/jobs/{population['failed']}").text
    assert "reports.build" in failed
    assert "ValueError: boom" in failed and "Traceback" in failed
    assert "3 of 3" in failed
    assert "&#34;user&#34;: 7" in failed or "&quot;user&quot;: 7" in failed
    for step in ("created", "run at", "started (locked at)", "finished"):
        assert f"<th>{step}</th>" in failed
    running = web.get(f"/jobs/{population['running']}").text
    assert f"worker {population['worker']}" in running


# -- filters and paging ---------------------------------------------------------------------------
def test_jobs_filters(web: Client, population: dict[str, int]) -> None:
    def ids(query: str) -> set[int]:
        response = web.get(f"/jobs?{query}")
        assert response.status_code == 200, response.text
        return set(listed_ids(response.text))

    assert ids("status=failed") == {population["failed"]}
    assert ids("queue=emails") == {population[name] for name in ("pending", "scheduled", "running")}
    assert ids("task=reports.build") == {population["failed"]}
    assert ids("queue=emails&status=pending") == {population["pending"], population["scheduled"]}
    # args containing a JSON value (jsonb @>)
    assert ids("args=" + '[{"user": 7}]') == {population["failed"]}
    assert ids("args=[42]") == {population["failed"]}
    assert ids("args=" + '["a@x.org"]') == {population["pending"]}
    assert ids("args=[43]") == set()
    # time range on created_at
    assert len(ids("from=2000-01-01T00:00")) == 6
    assert ids("to=2000-01-01T00:00") == set()
    assert len(ids("from=2000-01-01T00:00:00%2B00:00&to=2999-01-01T00:00")) == 6


def test_jobs_are_paged_by_keyset(
    web: Client, app: App, admin: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web_app, "PAGE_SIZE", 3)
    created = [insert_job(admin, app, queue="q") for _ in range(7)]

    first = web.get("/jobs?queue=q").text
    assert listed_ids(first) == created[::-1][:3]
    older = re.search(r'href="/jobs\?([^"]+)" rel="next"', first)
    assert older and "before=" in older[1]
    second = web.get("/jobs?" + older[1].replace("&amp;", "&")).text
    assert listed_ids(second) == created[::-1][3:6]
    assert "« newest" in second
    third_link = re.search(r'href="/jobs\?([^"]+)" rel="next"', second)
    assert third_link
    third = web.get("/jobs?" + third_link[1].replace("&amp;", "&")).text
    assert listed_ids(third) == created[:1]
    assert 'rel="next"' not in third


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/jobs?status=exploded", 400, "status"),
        ("/jobs?args=%5B", 400, "not JSON"),
        ("/jobs?from=yesterday", 400, "date and time"),
        ("/jobs?from=2024-02-01T00:00&to=2024-01-01T00:00", 400, "earlier"),
        ("/jobs?args=1e400", 400, "jsonb cannot store"),
        ("/jobs?args=NaN", 400, "not JSON"),
        ("/jobs?args=%5B%22%5Cu0000%22%5D", 400, "jsonb cannot store"),
        ("/jobs?queue=a%00b", 400, "NUL"),
        ("/jobs?before=abc", 400, "before"),
        ("/jobs?before=-5", 400, "before"),
        ("/jobs/abc", 404, "positive integers"),
        ("/jobs/0", 404, "does not exist"),
        ("/jobs/99999999", 404, "does not exist"),
        ("/jobs/99999999999999999999999", 404, "positive integers"),
        # Numbers of more digits than Python converts (4,300): refused before converting.
        ("/jobs/" + "9" * 5000, 404, "positive integers"),
        ("/jobs?before=" + "9" * 5000, 400, "before"),
        ("/jobs?workflow=" + "9" * 5000, 400, "not a workflow id"),
        ("/events/jobs?before=" + "9" * 5000, 400, "before"),
        ("/workflows?id=" + "9" * 5000, 400, "workflow id"),
        ("/workflows?before=" + "9" * 5000, 400, "before"),
        ("/workflows/" + "9" * 5000, 404, "positive integers"),
        ("/nowhere", 404, ""),
    ],
)
def test_bad_input_is_a_clear_4xx(web: Client, path: str, status: int, says: str) -> None:
    response = web.get(path)
    assert response.status_code == status, response.text
    assert says in response.text
    assert "Traceback" not in response.text


# -- actions --------------------------------------------------------------------------------------
def test_retry_a_failed_job(
    web: Client, app: App, admin: Connection, population: dict[str, int]
) -> None:
    failed = population["failed"]
    response = web.post(f"/jobs/{failed}/retry")
    assert response.status_code == 303
    assert response.headers["location"] == f"/jobs/{failed}?done=retried"
    assert status_of(admin, app, failed) == "pending"
    rows = select(admin, app, "SELECT max_attempts FROM {schema}.all_jobs WHERE id = %s", [failed])
    assert rows == [(4,)]  # one more attempt allowed (the CLI's rule)
    assert "Retried" in web.get(f"/jobs/{failed}?done=retried").text

    refused = web.post(f"/jobs/{population['pending']}/retry")
    assert refused.status_code == 409
    assert "only failed or cancelled jobs can be retried" in refused.text


def test_cancel_pending_and_running_jobs(
    web: Client, app: App, admin: Connection, population: dict[str, int]
) -> None:
    assert web.post(f"/jobs/{population['pending']}/cancel").status_code == 303
    assert status_of(admin, app, population["pending"]) == "cancelled"

    response = web.post(f"/jobs/{population['running']}/cancel")
    assert response.headers["location"].endswith("done=requested")
    flagged = select(
        admin,
        app,
        "SELECT cancel_requested FROM {schema}.all_jobs WHERE id = %s",
        [population["running"]],
    )
    assert flagged == [(True,)]

    response = web.post(f"/jobs/{population['done']}/cancel")
    assert response.headers["location"].endswith("done=finished")
    assert status_of(admin, app, population["done"]) == "done"


def test_delete_finished_jobs_only(
    web: Client, app: App, admin: Connection, population: dict[str, int]
) -> None:
    response = web.post(f"/jobs/{population['done']}/delete")
    assert response.status_code == 303
    assert status_of(admin, app, population["done"]) is None

    refused = web.post(f"/jobs/{population['pending']}/delete")
    assert refused.status_code == 409
    assert status_of(admin, app, population["pending"]) == "pending"
    assert web.post(f"/jobs/{population['done']}/delete").status_code == 404
    assert web.post(f"/jobs/{population['failed']}/explode").status_code == 404


def test_bulk_retry_and_cancel_act_on_what_the_filter_selects(
    web: Client, app: App, admin: Connection
) -> None:
    failed_a = [insert_job(admin, app, status="failed", task="a", finished_ago=5) for _ in range(3)]
    failed_b = insert_job(admin, app, status="failed", task="b", finished_ago=5)
    pending_a = [insert_job(admin, app, task="a", queue="slow") for _ in range(2)]
    pending_b = insert_job(admin, app, task="b", queue="slow")

    response = web.post("/jobs/bulk/retry", {"status": "failed", "task": "a"})
    assert response.status_code == 303
    assert "count=3" in response.headers["location"]
    assert [status_of(admin, app, job) for job in failed_a] == ["pending"] * 3
    assert status_of(admin, app, failed_b) == "failed"

    response = web.post("/jobs/bulk/cancel", {"queue": "slow", "task": "a"})
    assert response.status_code == 303
    assert "count=2" in response.headers["location"]
    assert [status_of(admin, app, job) for job in pending_a] == ["cancelled"] * 2
    assert status_of(admin, app, pending_b) == "pending"
    message = web.get(response.headers["location"]).text
    assert "Cancelled 2 pending job(s)" in message

    refused = web.post("/jobs/bulk/cancel", {})
    assert refused.status_code == 400
    assert "needs a filter" in refused.text
    assert web.post("/jobs/bulk/retry", {"status": "nope"}).status_code == 400


# -- security -------------------------------------------------------------------------------------
def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"authorization": f"Basic {token}"}


def test_without_auth_only_loopback_clients_are_served(make_client: Callable[..., Client]) -> None:
    assert make_client().get("/").status_code == 200
    remote = make_client(client=REMOTE).get("/")
    assert remote.status_code == 401
    assert "PGTASKS_WEB_USER" in remote.text
    assert make_client(client=REMOTE, insecure_no_auth=True).get("/").status_code == 200


def test_basic_auth_is_required_when_configured(make_client: Callable[..., Client]) -> None:
    web = make_client(client=REMOTE, auth=basic_auth("ops", "s3cret"))

    missing = web.get("/")
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Basic")
    assert web.get("/", headers=basic("ops", "wrong")).status_code == 401
    assert web.get("/", headers=basic("other", "s3cret")).status_code == 401
    assert web.get("/", headers={"authorization": "Basic !!notbase64"}).status_code == 401
    assert web.get("/", headers=basic("ops", "s3cret")).status_code == 200
    assert web.get("/events", headers=basic("ops", "wrong")).status_code == 401


def test_read_only_hides_and_refuses_every_action(
    make_client: Callable[..., Client], app: App, admin: Connection, population: dict[str, int]
) -> None:
    web = make_client(read_only=True)
    page = web.get(f"/jobs/{population['failed']}").text
    assert "read-only" in page
    assert "<button" not in page
    assert '<button type="submit" class="action' not in web.get("/jobs?status=failed").text

    for path in (
        f"/jobs/{population['failed']}/retry",
        f"/jobs/{population['pending']}/cancel",
        f"/jobs/{population['done']}/delete",
        "/jobs/bulk/retry",
    ):
        response = web.post(path, {"status": "failed"})
        assert response.status_code == 403, path
    assert status_of(admin, app, population["failed"]) == "failed"
    assert status_of(admin, app, population["done"]) == "done"


def test_posts_without_the_token_or_from_another_origin_are_refused(
    web: Client, app: App, admin: Connection, population: dict[str, int]
) -> None:
    path = f"/jobs/{population['failed']}/retry"
    assert web.post(path, csrf=False).status_code == 403
    assert web.post(path, {"csrf": "0" * 64}).status_code == 403
    assert web.post(path, origin="https://evil.example").status_code == 403
    assert web.post(path, origin=None).status_code == 403  # neither Origin nor Referer
    assert (
        web.post(path, origin=None, headers={"referer": "https://evil.example/x"}).status_code
        == 403
    )
    assert status_of(admin, app, population["failed"]) == "failed"
    # A same-origin Referer (no Origin) with the token is accepted.
    ok = web.post(path, origin=None, headers={"referer": f"{BASE_URL}/jobs/1"})
    assert ok.status_code == 303
    assert status_of(admin, app, population["failed"]) == "pending"


def test_args_and_errors_are_html_escaped(web: Client, app: App, admin: Connection) -> None:
    evil = "<script>alert('x')</script>"
    job = insert_job(
        admin,
        app,
        status="failed",
        task="t<b>",
        queue="q<i>",
        finished_ago=1,
        args=json.dumps([evil]),
        kwargs=json.dumps({"k": evil}),
        last_error=f"Traceback\nValueError: {evil}",
    )
    for path in (f"/jobs/{job}", "/jobs", "/", "/jobs?queue=q<i>"):
        html = web.get(path).text
        assert "<script>alert" not in html, path
        assert "<b>" not in html and "<i>" not in html, path
    assert "&lt;script&gt;alert(" in web.get(f"/jobs/{job}").text


def test_the_dsn_password_is_never_shown(
    make_client: Callable[..., Client], dsn: str, app: App
) -> None:
    html = make_client().get("/").text
    password = psycopg.conninfo.conninfo_to_dict(dsn).get("password")
    if password:
        assert str(password) not in html
    assert app.describe_database() in html


def test_mounted_under_a_prefix_links_stay_under_it(app: App, admin: Connection) -> None:
    job = insert_job(admin, app, queue="emails")
    outer = Starlette(routes=[Mount("/ops/tasks", app=asgi(app))])
    client = Client(outer)
    html = client.get("/ops/tasks/jobs").text
    assert f'href="/ops/tasks/jobs/{job}"' in html
    assert 'src="/ops/tasks/static/htmx.min.js"' in html
    assert client.get(f"/ops/tasks/jobs/{job}").status_code == 200
    overview = client.get("/ops/tasks/").text
    assert 'data-live="/ops/tasks/events"' in overview
    assert 'href="/ops/tasks/jobs?queue=emails"' in overview
    # What the event stream pushes links under the mount point too.
    dashboard = outer.routes[0].app.dashboard  # type: ignore[attr-defined]
    pushed = dashboard.fragment("_overview_live.html", "/ops/tasks", **dashboard.overview_context())
    assert 'href="/ops/tasks/jobs?queue=emails"' in pushed


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("localhost", True),
        ("0.0.0.0", False),  # noqa: S104
        ("::", False),
        ("10.0.0.5", False),
        ("::ffff:10.0.0.5", False),
        ("example.com", False),
        ("", False),
        (None, False),
    ],
)
def test_what_counts_as_loopback(host: str | None, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_an_unreachable_database_is_a_503_page_without_the_password() -> None:
    down = App(
        "postgresql://ops:s3cret-pw@127.0.0.1:1/shop",
        schema="unreachable",
        connect_timeout=1,
        connect_attempts=1,
    )
    try:
        response = Client(asgi(down)).get("/")
    finally:
        down.close()
    assert response.status_code == 503
    assert "cannot reach PostgreSQL" in response.text
    assert "s3cret-pw" not in response.text


def test_an_unmigrated_schema_is_a_503_page_that_says_what_to_run(
    make_app: Callable[..., App],
) -> None:
    response = Client(asgi(make_app(migrate=False))).get("/jobs")
    assert response.status_code == 503
    assert "pgtasks migrate" in response.text


def test_overview_shows_how_often_the_guarantees_were_exercised(web: Client, app: App) -> None:
    with app.connection() as conn:
        app.queries.add_counters(conn, {"rescued": 3, "lease_lost": 1})

    html = web.get("/").text

    counters = dict(
        re.findall(r'<tr data-counter="(\w+)"><th>[^<]*</th><td class="num">([\d,]+)</td>', html)
    )
    assert counters == {
        "lease_lost": "1",
        "rescued": "3",
        "fenced_writes_refused": "0",
        "enqueues_deduplicated": "0",
        "released_at_shutdown": "0",
        "unknown_task_jobs": "0",
        "expired": "0",
        "steps_checkpointed": "0",
        "steps_replayed": "0",
        "enqueues_debounced": "0",
        "batches_run": "0",
        "batch_jobs": "0",
    }
