"""The dashboard's workflow views through httpx's ASGI transport, on a real PostgreSQL:
the workflows list (states, search, paging), a workflow's page (its graph, steps,
results, timings and incidents), its Cancel button, a step's links from its job page,
the jobs list's workflow filter and badge, and what bad or hostile input gets.
"""

from __future__ import annotations

import html as html_text
import re
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pgtasks import App, chain, chord, group
from pgtasks._app.workflow_admin import list_workflows
from pgtasks.web import workflow_pages
from tests.support.inprocess import execute, select
from tests.support.population import insert_job
from tests.support.web import Client
from tests.support.workflows import settle, steps

Connection = psycopg.Connection[Any]


@pytest.fixture
def tasks(app: App) -> dict[str, Any]:
    @app.task(name="add")
    def add(a: int, b: int = 0) -> int:
        return a + b

    @app.task(name="report")
    def report(values: list[int]) -> str:
        return f"report of {values}"

    return {"add": add, "report": report}


def listed_workflows(html: str) -> list[int]:
    return [int(match) for match in re.findall(r'<tr data-workflow="(\d+)">', html)]


def drawn_steps(html: str) -> dict[int, str]:
    """The status of each step the graph draws (a box or a dot), by job id."""
    return {
        int(job): status
        for job, status in re.findall(
            r'class="(?:node|dot) [^"]*" id="step-\d+" data-job="(\d+)"'
            r' data-status="(\w+)"',
            html,
        )
    }


def status_of(admin: Connection, app: App, job_id: int) -> str | None:
    rows = select(admin, app, "SELECT status FROM {schema}.all_jobs WHERE id = %s", [job_id])
    return rows[0][0] if rows else None


def four_workflows(app: App, tasks: dict[str, Any]) -> dict[str, int]:
    """One workflow in each state, oldest first: done, failed, cancelled, running."""
    add = tasks["add"]
    done = chain(add.s(1, 2), add.s(3)).delay()
    first = steps(app, done.id)["0"]["id"]
    settle(app, {first: 3})
    settle(app, {steps(app, done.id)["1"]["id"]: 6})
    failed = chain(add.s(1, 1), add.s(2)).delay()
    settle(app, {steps(app, failed.id)["0"]["id"]: RuntimeError("boom")})
    cancelled = chain(add.s(5, 5), add.s(1)).delay()
    app.cancel_workflow(cancelled.id)
    running = chain(add.s(7, 7), add.s(1)).delay()
    return {"done": done.id, "failed": failed.id, "cancelled": cancelled.id, "running": running.id}


# -- the workflows list ---------------------------------------------------------------------------
def test_the_workflows_list_filters_by_state_searches_by_id_and_pages(
    web: Client, app: App, tasks: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = four_workflows(app, tasks)
    newest_first = [ids["running"], ids["cancelled"], ids["failed"], ids["done"]]

    html = web.get("/workflows").text
    assert listed_workflows(html) == newest_first
    row = re.search(rf'<tr data-workflow="{ids["done"]}">(.*?)</tr>', html, re.S)
    assert row, html
    assert "add → add" in row[1] and "2/2" in row[1] and "status-done" in row[1]
    assert f'href="/workflows/{ids["done"]}"' in row[1]
    assert '<a href="/workflows" aria-current="page">Workflows</a>' in html  # navigation

    for state in ("running", "done", "failed", "cancelled"):
        page = web.get(f"/workflows?status={state}")
        assert page.status_code == 200
        assert listed_workflows(page.text) == [ids[state]], state
    assert listed_workflows(web.get(f"/workflows?id={ids['failed']}").text) == [ids["failed"]]
    assert listed_workflows(web.get(f"/workflows?id={ids['failed']}&status=done").text) == []
    assert "no workflow 999999" in web.get("/workflows?id=999999").text

    # Keyset paging: "older »" goes on below the last id shown.
    monkeypatch.setattr(workflow_pages, "WORKFLOWS_PAGE_SIZE", 3)
    first_page = web.get("/workflows").text
    assert listed_workflows(first_page) == newest_first[:3]
    older = re.search(r'href="/workflows\?([^"]*)" rel="next"', first_page)
    assert older, first_page
    second_page = web.get("/workflows?" + older[1].replace("&amp;", "&")).text
    assert listed_workflows(second_page) == newest_first[3:]
    assert 'rel="next"' not in second_page

    # The overview lists the newest and links to the list.
    overview = web.get("/").text
    assert listed_workflows(overview) == newest_first
    assert 'href="/workflows?status=failed"' in overview


def test_the_state_tabs_count_all_and_running_workflows(
    web: Client, app: App, tasks: dict[str, Any]
) -> None:
    four_workflows(app, tasks)
    tasks["add"].delay(1, 2)  # a job of no workflow counts nowhere
    html = web.get("/workflows?status=failed").text
    assert re.search(r'data-tab="all"[^>]*>All <span class="count" id="count-all">4</span>', html)
    assert re.search(r'data-tab="running"[^>]*>Running <span class="count"[^>]*>1</span>', html)
    assert 'data-tab="failed" aria-current="page"' in html


def test_a_finished_state_page_reads_a_bounded_number_of_jobs_and_says_where_it_stopped(
    web: Client, app: App, tasks: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No index finds the failed workflows: each page reads the jobs of the newest
    workflows (WORKFLOW_SCAN_JOBS at most), lists those that match, and "search older
    workflows" goes on from the oldest workflow it reached, until every one was read."""
    from pgtasks.web import workflow_reads

    add = tasks["add"]
    failed = chain(add.s(1, 1), add.s(2)).delay()  # the oldest, 2 jobs
    settle(app, {steps(app, failed.id)["0"]["id"]: RuntimeError("boom")})
    done = []
    for value in range(4):  # newer, 2 jobs each, done
        flow = chain(add.s(value, 1), add.s(1)).delay()
        settle(app, {steps(app, flow.id)["0"]["id"]: value + 1})
        settle(app, {steps(app, flow.id)["1"]["id"]: value + 2})
        done.append(flow.id)
    monkeypatch.setattr(workflow_reads, "WORKFLOW_SCAN_JOBS", 3)  # 1.5 workflows a page

    seen: list[int] = []
    path = "/workflows?status=failed"
    pages = 0
    while path:
        html = web.get(path).text
        seen += listed_workflows(html)
        pages += 1
        assert pages < 10, html
        older = re.search(r'href="/workflows\?([^"]*)" rel="next">([^<]*)<', html)
        if older is None:
            assert 'id="searched"' not in html
            break
        assert "search older workflows" in older[2]
        assert "were not searched yet" in html_text.unescape(html)
        path = "/workflows?" + older[1].replace("&amp;", "&")
    assert seen == [failed.id]
    assert pages >= 3  # the scan was bounded: each page read part of the table
    # Done workflows fill their page from the first rows read.
    assert listed_workflows(web.get("/workflows?status=done").text)[:1] == [done[-1]]
    # The CLI's read (and the API) stays exact, whatever the bound.
    assert [found.id for found in list_workflows(app, status="failed")] == [failed.id]


def test_a_workflow_whose_failed_step_has_siblings_running_is_running_until_they_end(
    web: Client, app: App, tasks: dict[str, Any]
) -> None:
    add, report = tasks["add"], tasks["report"]
    workflow = chord([add.s(1, 1), add.s(2, 2)], report.s()).delay()
    members = steps(app, workflow.id)
    settle(app, {members["0.0"]["id"]: RuntimeError("boom")})
    assert listed_workflows(web.get("/workflows?status=running").text) == [workflow.id]
    assert listed_workflows(web.get("/workflows?status=failed").text) == []
    settle(app, {members["0.1"]["id"]: 2})
    assert listed_workflows(web.get("/workflows?status=failed").text) == [workflow.id]
    assert listed_workflows(web.get("/workflows?status=cancelled").text) == []
    assert listed_workflows(web.get("/workflows?status=running").text) == []


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ("status=stuck", "status: 'stuck' is not one of running, done, failed, cancelled"),
        ("id=abc", "id must be a workflow id"),
        ("id=-1", "id must be a workflow id"),
        ("id=99999999999999999999", "id must be a workflow id"),
        ("id=%EF%BC%91", "id must be a workflow id"),  # a full-width digit
        ("before=x", "before must be a job id"),
    ],
)
def test_a_bad_workflows_filter_is_a_400_saying_what_is_wrong(
    web: Client, query: str, problem: str
) -> None:
    for path in (f"/workflows?{query}", f"/events/workflows?{query}"):
        response = web.get(path)
        assert response.status_code == 400, (path, response.text)
        assert problem in html_text.unescape(response.text)


# -- a workflow's page ----------------------------------------------------------------------------
def test_a_workflow_page_draws_every_step_with_links_results_and_timings(
    web: Client, app: App, tasks: dict[str, Any]
) -> None:
    add, report = tasks["add"], tasks["report"]
    workflow = chain(
        add.s(1, 2), chord([add.s(1), add.s(2), add.s(3)], report.s()), add.s()
    ).delay()
    by_step = steps(app, workflow.id)
    settle(app, {by_step["0"]["id"]: 3})
    settle(app, {by_step[f"1.0.{i}"]["id"]: 4 + i for i in range(3)})
    settle(app, {by_step["1.1"]["id"]: "report of [4, 5, 6]"})

    response = web.get(f"/workflows/{workflow.id}")
    assert response.status_code == 200
    html = response.text
    assert f"Workflow {workflow.id}" in html
    assert 'id="workflow-state">running<' in html  # its last step is pending
    assert drawn_steps(html) == {
        by_step["0"]["id"]: "done",
        by_step["1.0.0"]["id"]: "done",
        by_step["1.0.1"]["id"]: "done",
        by_step["1.0.2"]["id"]: "done",
        by_step["1.1"]["id"]: "done",
        by_step["2"]["id"]: "pending",
    }
    # One edge per link: 0 → each member, each member → the callback, callback → last.
    assert len(re.findall(r'<path class="edge edge-', html)) == 7
    assert len(re.findall(r'<path class="edge edge-done"', html)) == 7
    # Each box links to its job; the steps table shows results and the step labels.
    assert f'href="/jobs/{by_step["1.1"]["id"]}"' in html
    table = re.search(r'<table class="grid steps" id="steps">(.*?)</table>', html, re.S)
    assert table
    assert (
        "&#34;report of [4, 5, 6]&#34;" in table[1] or "&quot;report of [4, 5, 6]&quot;" in table[1]
    )
    assert [int(job) for job in re.findall(r'data-step-job="(\d+)"', table[1])] == [
        by_step[step]["id"] for step in ("0", "1.0.0", "1.0.1", "1.0.2", "1.1", "2")
    ]
    assert "→ 3" in html  # a node shows the head of its result
    assert f'href="/jobs?workflow={workflow.id}"' in html
    assert "Cancel workflow" in html  # it runs
    assert 'id="incidents">none' in html
    assert f'data-live="/events/workflows/{workflow.id}"' in html


def test_a_failed_step_shows_its_error_and_the_steps_it_cancelled(
    web: Client, app: App, tasks: dict[str, Any]
) -> None:
    add, report = tasks["add"], tasks["report"]
    workflow = chord([add.s(1, 1), add.s(2, 2)], report.s()).delay()
    members = steps(app, workflow.id)
    settle(app, {members["0.0"]["id"]: ValueError("bad member"), members["0.1"]["id"]: 4})
    html = web.get(f"/workflows/{workflow.id}").text
    assert 'id="workflow-state">failed<' in html
    assert drawn_steps(html)[members["1"]["id"]] == "cancelled"
    assert "ValueError: bad member" in html
    assert "Cancel workflow" not in html  # it has ended


@pytest.mark.parametrize(
    "path",
    [
        "/workflows/999999999",
        "/workflows/abc",
        "/workflows/-1",
        "/workflows/1.5",
        "/workflows/99999999999999999999",
        "/events/workflows/abc",
    ],
)
def test_an_unknown_or_malformed_workflow_id_is_a_404(web: Client, path: str) -> None:
    response = web.get(path)
    assert response.status_code == 404, response.text
    assert "workflow" in response.text


def test_a_wide_group_is_one_block_of_dots_and_a_deep_chain_keeps_its_ends(
    web: Client, app: App, tasks: dict[str, Any]
) -> None:
    add, report = tasks["add"], tasks["report"]
    wide = chord([add.s(i, i) for i in range(100)], report.s()).delay()
    members = steps(app, wide.id)
    settle(app, {members[f"0.{i}"]["id"]: 2 * i for i in range(0, 100, 2)})
    html = web.get(f"/workflows/{wide.id}").text
    drawn = drawn_steps(html)
    assert len(drawn) == 101  # every member as a dot, and the callback as a box
    assert len(re.findall(r'<a href="/jobs/\d+" class="dot ', html)) == 100
    assert "100 steps in parallel · add" in html
    assert "50 pending · 50 done" in html
    # The steps table lists the first STEP_ROWS (by id) and says how many more there are.
    assert len(re.findall(r"<tr data-step-job=", html)) == workflow_pages.STEP_ROWS == 50
    assert f'and 51 more steps: <a href="/jobs?workflow={wide.id}">its jobs</a>' in html
    assert len(re.findall(r'<path class="edge', html)) == 1  # the block → the callback
    width = int(re.search(r'<svg class="workflow-graph" viewBox="0 0 (\d+) ', html)[1])  # type: ignore[index]
    assert width < 700

    deep = chain(add.s(1, 1), *[add.s(1) for _ in range(39)]).delay()
    html = web.get(f"/workflows/{deep.id}").text
    assert len(re.findall(r'<a href="/jobs/\d+" class="node ', html)) == 8
    assert len(re.findall(r'<a href="/jobs/\d+" class="dot ', html)) == 32
    assert "32 steps in a chain, 4 to 35" in html
    height = int(re.search(r'<svg class="workflow-graph" viewBox="0 0 \d+ (\d+)"', html)[1])  # type: ignore[index]
    assert height < 1000


def test_hostile_task_names_results_errors_shapes_and_incidents_are_escaped(
    web: Client, app: App, admin: Connection, tasks: dict[str, Any]
) -> None:
    add = tasks["add"]
    workflow = chain(add.s(1, 2), add.s(3)).delay()
    first, second = steps(app, workflow.id)["0"]["id"], steps(app, workflow.id)["1"]["id"]
    hostile = '<script>alert(1)</script></text><img src=x onerror=alert(2)>"'
    execute(
        admin, app, "UPDATE {schema}.workflows SET shape = %s WHERE id = %s", [hostile, workflow.id]
    )
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET task_name = %s, status = 'failed', attempts = 1,"
        " finished_at = now(), last_error = %s, result = to_jsonb(%s::text),"
        " prev_ids = ARRAY[NULL, 999999999, id]::bigint[] WHERE id = %s",
        [hostile, "Traceback:\n" + hostile, hostile, second],
    )
    execute(
        admin,
        app,
        "INSERT INTO {schema}.workflow_incidents (kind, workflow_id, job_id, step, detail)"
        " VALUES ('tolerated', %s, %s, %s, %s)",
        [workflow.id, first, hostile, hostile],
    )
    for path in (
        f"/workflows/{workflow.id}",
        "/workflows",
        f"/jobs/{first}",
        f"/jobs?workflow={workflow.id}",
        "/",
    ):
        response = web.get(path)
        assert response.status_code == 200, (path, response.text)
        assert "<script>alert" not in response.text, path
        assert "<img src=x" not in response.text, path
    html = web.get(f"/workflows/{workflow.id}").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert len(drawn_steps(html)) == 2  # the links to a missing job and to itself ignored


def test_a_graph_of_rows_linked_in_a_cycle_is_drawn_without_the_cycle(
    web: Client, app: App, admin: Connection, tasks: dict[str, Any]
) -> None:
    add = tasks["add"]
    workflow = chain(add.s(1, 2), add.s(3), add.s(4)).delay()
    by_step = steps(app, workflow.id)
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET prev_ids = ARRAY[%s]::bigint[] WHERE id = %s",
        [by_step["2"]["id"], by_step["0"]["id"]],
    )
    html = web.get(f"/workflows/{workflow.id}").text
    assert len(drawn_steps(html)) == 3
    assert "form a cycle" in html


# -- cancel ---------------------------------------------------------------------------------------
def test_cancel_a_workflow_from_its_page(
    web: Client,
    app: App,
    admin: Connection,
    tasks: dict[str, Any],
    make_client: Callable[..., Client],
) -> None:
    add = tasks["add"]
    workflow = chain(add.s(1, 2), add.s(3), add.s(4)).delay()
    jobs = [job["id"] for job in app.get_workflow(workflow.id)["jobs"]]

    # Refused: read-only (and no button), no CSRF token, another origin.
    read_only = make_client(read_only=True)
    assert "Cancel workflow" not in read_only.get(f"/workflows/{workflow.id}").text
    assert read_only.post(f"/workflows/{workflow.id}/cancel").status_code == 403
    assert web.post(f"/workflows/{workflow.id}/cancel", csrf=False).status_code == 403
    elsewhere = web.post(f"/workflows/{workflow.id}/cancel", origin="http://evil.example")
    assert elsewhere.status_code == 403
    assert [status_of(admin, app, job) for job in jobs] == ["pending", "waiting", "waiting"]

    response = web.post(f"/workflows/{workflow.id}/cancel")
    assert response.status_code == 303
    assert response.headers["location"] == (
        f"/workflows/{workflow.id}?done=workflow-cancelled&count=3"
    )
    assert [status_of(admin, app, job) for job in jobs] == ["cancelled"] * 3
    page = web.get(response.headers["location"]).text
    assert "Cancelled the workflow: 3 job(s) cancelled or asked to stop" in page
    assert 'id="workflow-state">cancelled<' in page

    again = web.post(f"/workflows/{workflow.id}/cancel")
    assert again.status_code == 409
    assert f"workflow {workflow.id} is cancelled: none of its jobs is waiting" in again.text
    assert web.post("/workflows/999999999/cancel").status_code == 404
    assert web.post("/workflows/abc/cancel").status_code == 404
    assert web.post(f"/workflows/{workflow.id}/retry").status_code == 404
    assert web.get(f"/workflows/{workflow.id}/cancel").status_code == 405


def test_the_workflow_pages_and_cancel_need_the_same_credentials_as_every_page(
    app: App, admin: Connection, tasks: dict[str, Any], make_client: Callable[..., Client]
) -> None:
    import base64

    from pgtasks.web import basic_auth
    from tests.support.web import REMOTE

    add = tasks["add"]
    workflow = chain(add.s(1, 2), add.s(3)).delay()
    jobs = [job["id"] for job in app.get_workflow(workflow.id)["jobs"]]
    web = make_client(client=REMOTE, auth=basic_auth("ops", "pw"))
    token = base64.b64encode(b"ops:pw").decode()
    good, bad = {"Authorization": f"Basic {token}"}, {"Authorization": "Basic b3BzOng="}
    for path in ("/workflows", f"/workflows/{workflow.id}", f"/events/workflows/{workflow.id}"):
        for headers in ({}, bad):
            response = web.get(path, headers=headers)
            assert response.status_code == 401, (path, headers)
            assert response.headers["www-authenticate"].startswith("Basic")
    assert web.post(f"/workflows/{workflow.id}/cancel", headers=bad).status_code == 401
    assert [status_of(admin, app, job) for job in jobs] == ["pending", "waiting"]
    assert web.get(f"/workflows/{workflow.id}", headers=good).status_code == 200
    response = web.post(f"/workflows/{workflow.id}/cancel", headers=good)
    assert response.status_code == 303
    assert [status_of(admin, app, job) for job in jobs] == ["cancelled"] * 2


# -- a step's job page and the jobs list ----------------------------------------------------------
def test_a_steps_job_page_links_its_workflow_its_step_and_its_neighbours(
    web: Client, app: App, admin: Connection, tasks: dict[str, Any]
) -> None:
    add = tasks["add"]
    workflow = chain(add.s(1, 2), group(add.s(1), add.s(2)), add.si(0)).delay()
    by_step = steps(app, workflow.id)
    member = by_step["1.0"]["id"]
    html = web.get(f"/jobs/{member}").text
    assert f'href="/workflows/{workflow.id}#step-{member}" id="workflow-step"' in html
    assert f'href="/workflows/{workflow.id}" id="workflow-link"' in html
    previous = re.search(r'id="previous-steps">(.*?)</td>', html, re.S)
    following = re.search(r'id="next-steps">(.*?)</td>', html, re.S)
    assert previous and following
    assert re.findall(r'data-job="(\d+)"', previous[1]) == [str(by_step["0"]["id"])]
    assert re.findall(r'data-job="(\d+)"', following[1]) == [str(by_step["2"]["id"])]
    assert "step <code>0</code> add" in previous[1]
    first = web.get(f"/jobs/{by_step['0']['id']}").text
    following = re.search(r'id="next-steps">(.*?)</td>', first, re.S)
    assert following
    assert re.findall(r'data-job="(\d+)"', following[1]) == [
        str(by_step["1.0"]["id"]),
        str(by_step["1.1"]["id"]),
    ]
    assert "none" in re.search(r'id="previous-steps">(.*?)</td>', first, re.S)[1]  # type: ignore[index]

    plain = insert_job(admin, app)
    assert 'id="workflow"' not in web.get(f"/jobs/{plain}").text


def test_a_chord_callbacks_page_names_its_first_members_and_how_many_more(
    web: Client, app: App, tasks: dict[str, Any]
) -> None:
    add, report = tasks["add"], tasks["report"]
    workflow = chord([add.s(i, i) for i in range(30)], report.s()).delay()
    callback = steps(app, workflow.id)["1"]["id"]
    html = web.get(f"/jobs/{callback}").text
    previous = re.search(r'id="previous-steps">(.*?)</td>', html, re.S)
    assert previous
    assert len(re.findall(r'class="neighbour"', previous[1])) == 20
    assert "and 10 more" in previous[1]


def test_the_jobs_list_filters_by_workflow_and_badges_its_steps(
    web: Client, app: App, admin: Connection, tasks: dict[str, Any]
) -> None:
    add = tasks["add"]
    one = chain(add.s(1, 2), add.s(3)).delay()
    other = chain(add.s(5, 5), add.s(1)).delay()
    plain = insert_job(admin, app, task="add")
    ours = [job["id"] for job in app.get_workflow(one.id)["jobs"]]

    html = web.get(f"/jobs?workflow={one.id}").text
    assert [int(job) for job in re.findall(r'<tr data-job="(\d+)">', html)] == ours[::-1]
    assert f'of <a href="/workflows/{one.id}">workflow {one.id}</a>' in html
    assert (
        f'href="/workflows/{one.id}#step-{ours[0]}" data-workflow="{one.id}">wf {one.id} · 0<'
        in html
    )
    assert 'name="workflow" value="' + str(one.id) in html
    # The other filters apply within the workflow.
    pending = web.get(f"/jobs?workflow={one.id}&status=pending").text
    assert re.findall(r'<tr data-job="(\d+)">', pending) == [str(ours[0])]
    # Every job of the list: badges on steps only.
    everything = web.get("/jobs").text
    assert f'data-workflow="{other.id}"' in everything
    plain_row = re.search(rf'<tr data-job="{plain}">(.*?)</tr>', everything, re.S)
    assert plain_row and "workflow-badge" not in plain_row[1]

    for bad in ("abc", "-1", "1.5", "99999999999999999999"):
        response = web.get(f"/jobs?workflow={bad}")
        assert response.status_code == 400
        assert "workflow: " in response.text and "is not a workflow id" in response.text

    # Bulk actions of a workflow filter act on that workflow's jobs only.
    counts = web.get(f"/jobs/counts?workflow={one.id}", headers={"accept": "application/json"})
    assert counts.json()["cancellable"] == 2
    response = web.post("/jobs/bulk/cancel", {"workflow": str(one.id)})
    assert response.status_code == 303
    assert f"workflow={one.id}" in response.headers["location"]
    assert [status_of(admin, app, job) for job in ours] == ["cancelled", "cancelled"]
    others = [job["id"] for job in app.get_workflow(other.id)["jobs"]]
    assert [status_of(admin, app, job) for job in others] == ["pending", "waiting"]
    assert status_of(admin, app, plain) == "pending"
