"""The dashboard's limits page (``/limits``) through httpx's ASGI transport, on a real
PostgreSQL: every kind of limit with its capacity, running jobs (per key), tokens and
held jobs; the kind tabs, a search by name, the busiest keys and their cap; rows written
by hand (values past the checks, limits no worker stored, names pgtasks does not write, a
job under 100,000 limit instances); bad query parameters."""

from __future__ import annotations

import html as html_module
import re
from typing import Any

import psycopg
import pytest

from pgtasks import App
from pgtasks._leases import ClaimedJob, ClaimRequest, Finish
from pgtasks._retry import Outcome
from tests.support.inprocess import execute
from tests.support.web import Client

Connection = psycopg.Connection[Any]


def store_limits(app: App) -> None:
    """What a worker does when it starts: store its app's limit definitions."""
    with app.connection() as conn:
        app.queries.upsert_limits(conn, app.limit_definitions())


def claim(app: App, count: int) -> list[ClaimedJob]:
    """A worker's limited claim (a registered worker id, as a worker's claim would run)."""
    with app.connection() as conn:
        worker = app.queries.register_worker(conn, hostname="h", pid=1, queues=None, concurrency=8)
        request = ClaimRequest(worker, count, limited=True)
        return list(app.queries.finish_and_claim_jobs(conn, (), request).claimed)


def text(fragment: str) -> str:
    """What a reader sees (a bar's fallback text left out)."""
    fragment = re.sub(r"<progress[^>]*>.*?</progress>", " ", fragment, flags=re.S)
    return " ".join(html_module.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def limit_row(page: str, name: str) -> dict[str, str]:
    """The cells of one limit's row (``data-stat`` cells as text, and ``row``: all of it)."""
    row = re.search(
        rf'<tr data-limit="{re.escape(html_module.escape(name))}"[^>]*>(.*?)</tr>', page, re.S
    )
    assert row, f"no row for limit {name!r}"
    cells = re.findall(r'data-stat="(\w+)">(.*?)</td>', row[1], re.S)
    return {"row": text(row[1]), **{stat: text(value) for stat, value in cells}}


def key_rows(page: str, name: str) -> dict[str, dict[str, str]]:
    table = re.search(
        rf'data-keys-of="{re.escape(html_module.escape(name))}">(.*?)</table>', page, re.S
    )
    assert table, f"no keys table for {name!r}"
    rows = {}
    for key, body in re.findall(r'<tr data-key="([^"]*)">(.*?)</tr>', table[1], re.S):
        cells = re.findall(r'data-stat="(\w+)">(.*?)</td>', body, re.S)
        rows[html_module.unescape(key)] = {stat: text(value) for stat, value in cells}
    return rows


@pytest.fixture
def limited(app: App) -> dict[str, Any]:
    """A queue limit, a task's concurrency, a task's rate and a per-key limit, stored as a
    worker stores them, with jobs pending under each and some of them claimed."""
    app.queue("reports", concurrency=3)

    @app.task(name="reports.build", queue="reports")
    def build(n: int) -> None: ...

    @app.task(name="api.call", rate_limit="2/s")
    def call(n: int) -> None: ...

    @app.task(name="mail.send", concurrency=2)
    def send(n: int) -> None: ...

    @app.task(name="sync.user", concurrency_key=lambda user, **_: user, concurrency=1)
    def sync(user: str, n: int) -> None: ...

    store_limits(app)
    build.delay_many([{"n": n} for n in range(5)])
    call.delay_many([{"n": n} for n in range(4)])
    send.delay_many([{"n": n} for n in range(3)])
    sync.delay_many([{"user": user, "n": n} for user in ("ann", "bob", "cy") for n in range(2)])
    claimed = claim(app, 50)
    return {"claimed": claimed}


def test_every_limit_with_its_kind_capacity_running_tokens_and_held_jobs(
    web: Client, app: App, limited: dict[str, Any]
) -> None:
    running = {}
    for job in limited["claimed"]:
        running[job.task_name] = running.get(job.task_name, 0) + 1
    # The claim takes each limit's capacity: 3 of the queue's, 2 of mail.send, one per key,
    # and as many of api.call as the rate's burst holds tokens.
    assert (running["reports.build"], running["mail.send"], running["sync.user"]) == (3, 2, 3)
    response = web.get("/limits")
    assert response.status_code == 200, response.text
    page = response.text

    queue = limit_row(page, "queue:reports")
    assert "queue concurrency" in queue["row"]
    assert (queue["capacity"], queue["running"], queue["pending"], queue["held"]) == (
        "3", "3 of 3", "2", "2"
    )  # fmt: skip
    task = limit_row(page, "task:mail.send")
    assert "task concurrency" in task["row"] and "rate" not in task["row"]
    assert (task["capacity"], task["running"], task["pending"], task["held"]) == (
        "2", "2 of 2", "1", "1"
    )  # fmt: skip
    rate = limit_row(page, "task:api.call")
    assert "task rate" in rate["row"] and rate["capacity"] == "-"
    assert rate["rate"] == "2/s a token every 500 ms"
    assert re.fullmatch(r"\d\.\d\d of 1\.50( next token in \d+ ms)?", rate["tokens"]), rate
    assert rate["running"] == str(running["api.call"])
    assert rate["pending"] == str(4 - running["api.call"])
    # No whole token left for them now (or one, refilled since the claim).
    assert int(rate["pending"]) - 1 <= int(rate["held"]) <= int(rate["pending"])
    keyed = limit_row(page, "key:sync.user")
    assert "keyed concurrency" in keyed["row"]
    assert (keyed["capacity"], keyed["running"], keyed["keys"], keyed["held"]) == (
        "1 per key", "3 over 3 key(s)", "3", "3"
    )  # fmt: skip
    per_key = key_rows(page, "key:sync.user")
    assert per_key == {
        user: {"running": "1 of 1", "pending": "1", "held": "1"} for user in ("ann", "bob", "cy")
    }
    # Links: the nav, each limit's own view, and its jobs.
    assert '<a href="/limits" aria-current="page">Limits</a>' in page
    assert 'href="/limits?name=queue%3Areports"' in page
    assert 'href="/jobs?queue=reports&amp;status=running"' in page
    assert 'href="/jobs?task=mail.send&amp;status=pending"' in page
    assert 'data-live="/events/limits"' in page
    assert 'href="/limits"' in web.get("/").text  # the overview's nav


def test_kind_tabs_a_search_by_name_and_the_live_part(
    web: Client, app: App, limited: dict[str, Any]
) -> None:
    page = web.get("/limits").text
    tabs = dict(re.findall(r'data-tab="(\w+)"[^>]*>[^<]*<span class="count">(\d+)</span>', page))
    assert tabs == {"all": "4", "task": "1", "queue": "1", "key": "1", "rate": "1"}
    for kind, names in (
        ("task", ["task:mail.send"]),
        ("queue", ["queue:reports"]),
        ("key", ["key:sync.user"]),
        ("rate", ["task:api.call"]),
    ):
        shown = web.get(f"/limits?kind={kind}").text
        assert re.findall(r'<tr data-limit="([^"]+)"', shown) == names, kind
        assert f'data-live="/events/limits?kind={kind}"' in shown
    found = web.get("/limits?name=key%3Async.user").text
    assert re.findall(r'<tr data-limit="([^"]+)"', found) == ["key:sync.user"]
    missing = web.get("/limits?name=task%3Anowhere")
    assert missing.status_code == 200
    assert "no limit named task:nowhere" in text(missing.text)
    assert "no limit named queue:reports" in text(
        web.get("/limits?kind=rate&name=queue%3Areports").text
    )


def test_the_busiest_keys_are_listed_and_the_page_says_how_many_are_not(
    web: Client, app: App
) -> None:
    @app.task(name="tenant.job", concurrency_key=lambda tenant: tenant, concurrency=2)
    def job(tenant: str) -> None: ...

    store_limits(app)
    job.delay_many([{"tenant": f"t{n:02}"} for n in range(25) for _ in range(1 + (n == 7))])
    page = web.get("/limits").text
    keys = key_rows(page, "key:tenant.job")
    assert len(keys) == 10 and next(iter(keys)) == "t07"  # the one with the most pending first
    assert "The 10 busiest of 25 keys are listed (most running, then most pending): list" in text(
        page
    )
    assert 'href="/limits?keys=50"' in page
    wider = web.get("/limits?keys=50").text
    assert len(key_rows(wider, "key:tenant.job")) == 25
    assert "busiest of" not in wider
    narrow = web.get("/limits?keys=3").text
    assert len(key_rows(narrow, "key:tenant.job")) == 3
    assert 'href="/limits?keys=50"' in narrow
    assert "no rate limit" in text(web.get("/limits?kind=rate").text)
    capped = web.get("/limits?keys=200")
    assert capped.status_code == 200 and len(key_rows(capped.text, "key:tenant.job")) == 25


def test_no_limits_stored_says_how_they_are_declared(web: Client) -> None:
    response = web.get("/limits")
    assert response.status_code == 200
    assert "no limits are stored (a worker stores its app's limits when it starts" in text(
        response.text
    )


@pytest.mark.parametrize(
    "query",
    [
        "kind=bogus",
        "kind=%3Cscript%3E",
        "keys=0",
        "keys=201",
        "keys=-1",
        "keys=abc",
        "keys=%EF%BC%91",  # a full-width digit one
        "keys=" + "9" * 5000,
        "name=" + "x" * 1001,
    ],
)
def test_a_bad_query_parameter_is_a_400_that_says_what_is_wrong(web: Client, query: str) -> None:
    for path in ("/limits", "/events/limits"):
        response = web.get(f"{path}?{query}")
        assert response.status_code == 400, (path, query, response.text[:300])
        assert "bad filter" in response.text
        assert "<script>" not in response.text


def test_hostile_limits_rows_render_marked_and_escaped(
    web: Client, app: App, admin: Connection
) -> None:
    """Rows a DBA or another program wrote by hand: values past the table's checks (which
    were dropped), names pgtasks does not write, limits jobs name that no worker stored,
    a job under 100,000 instances. The page renders them all, marked; never a 500."""

    @app.task(name="api.call", rate_limit="5/s", concurrency=2)
    def call(n: int) -> None: ...

    store_limits(app)
    call.delay_many([{"n": n} for n in range(3)])
    table = f"{app.schema}.limits"
    for (constraint,) in admin.execute(
        "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'c'",
        [table],
    ).fetchall():
        admin.execute(f"ALTER TABLE {table} DROP CONSTRAINT {constraint}")
    admin.execute(
        f"UPDATE {table} SET tokens = 'NaN', burst = 'Infinity', rate_period = 'NaN',"
        " refilled_at = '-infinity', updated_at = 'infinity', concurrency = 0"
    )
    admin.execute(
        f"INSERT INTO {table} (name, concurrency, rate_count, rate_period, burst, tokens)"
        " VALUES ('<script>alert(1)</script>', 1, NULL, NULL, 1, 1),"
        " ('task:tiny', NULL, 1, 1e-300, 1e300, '-Infinity'),"
        " (%s, 2, NULL, NULL, 1, 1)",
        ["key:odd\x1fname\x07" + "y" * 400],
    )
    admin.execute(f"ALTER TABLE {app.schema}.jobs DROP CONSTRAINT jobs_limit_groups_check")
    orphan, overloaded = (
        call.delay(100),
        call.delay(101),
    )
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET limit_groups = ARRAY['queue:nowhere', 'key:ghost' || chr(31)"
        " || '<b>k</b>', NULL] WHERE id = %s",
        [orphan.id],
    )
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET limit_groups = ARRAY(SELECT 'task:flood' || g"
        " FROM generate_series(1, 100000) AS g) WHERE id = %s",
        [overloaded.id],
    )
    response = web.get("/limits")
    assert response.status_code == 200, response.text
    page = response.text
    assert "<script>alert(1)</script>" not in page and "<b>k</b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # Values past the checks: marked, shown for what they are.
    broken = limit_row(page, "task:api.call")
    assert "values written by hand past the limits table's checks" in broken["row"]
    assert "a concurrency below 1" in broken["row"]
    assert broken["rate"].startswith("5/nans")  # the stored period, NaN
    tiny = limit_row(page, "task:tiny")
    assert "values written by hand past the limits table's checks" in tiny["row"]
    assert "not a name pgtasks writes" in limit_row(page, "<script>alert(1)</script>")["row"]
    # A name with control characters: escaped, and cut (200 characters shown).
    shown = set(re.findall(r"<code>(key:odd[^<]*)</code>", page))  # its row and its keys
    assert shown == {"key:odd\\x1fname\\x07" + "y" * 187 + "…"}, shown
    # Limits jobs name that no worker stored.
    for name in ("queue:nowhere", "key:ghost"):
        row = limit_row(page, name)
        assert "not stored: jobs name this limit" in row["row"], row
        assert "not stored" in row["row"]
    assert key_rows(page, "key:ghost") == {
        "<b>k</b>": {"running": "0", "pending": "1", "held": "0"}
    }
    # The job under 100,000 instances: counted apart, named, left out of every count.
    assert "task:flood1" not in page
    overlimited = re.search(r'id="overlimited">(.*?)</p>', page, re.S)
    assert overlimited, "the overloaded job is not reported"
    assert "1 pending job(s) carry more than 8 limit instances" in text(overlimited[1])
    assert f'href="/jobs/{overloaded.id}"' in overlimited[1]
    assert limit_row(page, "task:api.call")["pending"] == "3"
    # Its job page cuts the list too.
    job_page = web.get(f"/jobs/{overloaded.id}")
    assert job_page.status_code == 200
    assert len(job_page.text) < 100_000
    assert (
        "and 99,980 more ⚠ 100,000 limit instances: no worker claims a job under more than 8"
        in (text(job_page.text))
    )
    # The live part renders the same rows.
    stream = web.get("/events/limits?kind=bogus")
    assert stream.status_code == 400


def test_a_long_backlog_is_counted_up_to_the_next_jobs_in_claim_order_and_says_so(
    web: Client, app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page counts at most LIMITED_SCAN pending limited jobs (the next a claim takes):
    past it, pending, due, held and keys are those of the jobs read, marked +; running
    counts every running job."""
    from pgtasks.web import limit_reads

    @app.task(name="mail.send", concurrency=1)
    def send(n: int) -> None: ...

    @app.task(name="sync.user", concurrency_key=lambda user: user, concurrency=1)
    def sync(user: str) -> None: ...

    store_limits(app)
    send.delay_many([{"n": n} for n in range(3)])
    sync.delay_many([{"user": user} for user in ("ann", "bob", "cy", "dee")])
    assert len(claim(app, 2)) == 2  # mail.send's first job, ann's
    monkeypatch.setattr(limit_reads, "LIMITED_SCAN", 3)
    page = web.get("/limits").text
    assert "More than 3 limited jobs are pending" in text(page)
    mail = limit_row(page, "task:mail.send")
    assert (mail["running"], mail["pending"], mail["held"]) == ("1 of 1", "2+", "2+")
    keyed = limit_row(page, "key:sync.user")
    assert keyed["running"].startswith("1 over") and keyed["pending"] == "1+"
    monkeypatch.setattr(limit_reads, "LIMITED_SCAN", 100)
    page = web.get("/limits").text
    assert 'id="capped"' not in page
    assert limit_row(page, "key:sync.user")["pending"] == "3"


def test_fair_keys_and_sequences_with_a_held_one(app: App, web: Client) -> None:
    @app.task(fair_key=lambda tenant, n: tenant)
    def tenant_job(tenant: str, n: int) -> None: ...

    @app.task(sequence_key=lambda account: account, max_attempts=1)
    def apply(account: str) -> None: ...

    tenant_job.delay_many([{"tenant": "big<co>", "n": n} for n in range(4)])
    tenant_job.delay("small", 0)
    held = [apply.delay("acct").id for _ in range(3)]
    apply.delay("free")
    with app.connection() as conn:
        worker = app.queries.register_worker(conn, hostname="h", pid=1, queues=None, concurrency=8)
        request = ClaimRequest(worker, 10, task_names=(apply.name,))
        claimed = app.queries.finish_and_claim_jobs(conn, (), request).claimed
        head = [job for job in claimed if job.id == held[0]]
        app.queries.finish_jobs(conn, [Finish.of(job, Outcome.failed("boom")) for job in head])
    page = web.get("/limits").text
    # The limit the first fair job stored is shown as fair queuing, with no mark.
    row = limit_row(page, "fair:")
    assert "fair queuing" in row["row"] and "⚠" not in row["row"]
    fair = re.search(r'<table class="grid fair-keys">(.*?)</table>', page, re.S)
    assert fair is not None
    assert 'data-fair-key="big&lt;co&gt;" data-list="busiest"' in fair[1]
    assert "<co>" not in fair[1]
    assert 'data-fair-key="small" data-list="starved"' in fair[1]
    assert 'id="held-sequences"' in page
    acct = re.search(r'<tr data-sequence="acct" class="marked">(.*?)</tr>', page, re.S)
    assert acct is not None and f"failed job {held[0]}" in text(acct[1])
    assert text(acct[1]).startswith("acct 2 -")
    free = re.search(r'<tr data-sequence="free">(.*?)</tr>', page, re.S)
    assert free is not None and "running" in text(free[1])
