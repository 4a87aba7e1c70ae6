"""The dashboard's runtime controls (migration 0022): limits set, paused, resumed and
reset from the limits page; run now, snooze and edit the arguments of a pending job;
run now and snooze the ticked jobs. CSRF-checked, refused read-only, audited."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg

from pgtasks import App
from pgtasks._app import controls
from tests.support.population import insert_job
from tests.support.web import Client

Connection = psycopg.Connection[Any]


def states(app: App) -> dict[str, Any]:
    return {state.name: state for state in app.admin.limits()}


def job_row(admin_conn: Connection, app: App, job_id: int) -> dict[str, Any]:
    with admin_conn.cursor(row_factory=psycopg.rows.dict_row) as cursor:
        cursor.execute(
            f"SELECT status, run_at, attempts, args, kwargs, limit_groups, limit_key"
            f' FROM "{app.schema}".jobs WHERE id = %s',
            [job_id],
        )
        row = cursor.fetchone()
    assert row is not None
    return row


def test_the_limits_page_sets_pauses_resumes_and_resets_a_limit_and_lists_the_changes(
    web: Client, app: App
) -> None:
    @app.task(name="mail.send", queue="mail")
    def send() -> None: ...

    send.apply_async(countdown=3600)
    page = web.get("/limits").text
    assert 'id="change-limit"' in page and "no limit was changed at runtime" in page

    response = web.post("/limits/set", {"name": "task:mail.send", "concurrency": "2"})
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/limits?name=task%3Amail.send&done=limit-set"
    state = states(app)["task:mail.send"]
    assert (state.concurrency, state.declared, state.pending) == (2, False, 1)

    page = web.get(response.headers["location"]).text
    assert "Limit changed: every worker applies it from its next claim." in page
    assert "set at runtime by dashboard:anonymous@127.0.0.1" in page
    audit = re.findall(r'<tr data-audit="\d+">(.*?)</tr>', page, re.S)
    assert len(audit) == 1
    assert "dashboard:anonymous@127.0.0.1" in audit[0] and "concurrency=2 rate=-" in audit[0]
    assert 'name="concurrency" size="6" value="2"' in page  # the form holds the values

    assert web.post("/limits/set", {"name": "task:mail.send", "rate": "5/s"}).status_code == 303
    assert (states(app)["task:mail.send"].concurrency, states(app)["task:mail.send"].rate) == (
        2,
        "5/s",
    )
    assert web.post("/limits/pause", {"name": "task:mail.send"}).status_code == 303
    paused = states(app)["task:mail.send"]
    assert (paused.paused, paused.concurrency) == (True, 0)
    assert "data-paused" in web.get("/limits").text
    assert web.post("/limits/resume", {"name": "task:mail.send"}).status_code == 303
    assert states(app)["task:mail.send"].concurrency == 2
    assert web.post("/limits/reset", {"name": "task:mail.send"}).status_code == 303
    assert "task:mail.send" not in states(app)
    actions = [row["action"] for row in controls.read_audit(app)]
    assert actions == ["reset", "resume", "pause", "set", "set"]


def test_bad_limit_changes_get_a_clear_400_and_change_nothing(web: Client, app: App) -> None:
    cases = [
        ({"name": "mail.send", "concurrency": "2"}, "must be queue:<queue>, task:<task>"),
        ({"name": "task:x", "concurrency": "zero"}, "concurrency must be a number"),
        ({"name": "task:x", "concurrency": "0"}, "concurrency must be an int >= 1"),
        ({"name": "task:x", "rate": "fast"}, "rate must look like"),
        ({"name": "task:x"}, "give a concurrency or a rate"),
        ({"name": "key:x", "concurrency": "2"}, "a per-key limit is declared on the task"),
        ({"name": "", "concurrency": "2"}, "limit name must be a non-empty string"),
    ]
    for form, expected in cases:
        response = web.post("/limits/set", form)
        assert response.status_code == 400, (form, response.status_code)
        assert expected in html.unescape(response.text), (form, response.text[-600:])
    assert web.post("/limits/reset", {"name": "task:x"}).status_code == 400
    assert web.post("/limits/resume", {"name": "task:x"}).status_code == 400
    assert web.post("/limits/drop", {"name": "task:x"}).status_code == 404
    assert states(app) == {} and controls.read_audit(app) == []


def test_runtime_controls_need_the_token_and_are_refused_read_only(
    make_client: Callable[..., Client], app: App, admin: Connection
) -> None:
    @app.task(name="mail.later")
    def later() -> None: ...

    job = later.apply_async(countdown=3600)
    web = make_client()
    assert web.post("/limits/set", {"name": "task:x", "rate": "1/s"}, csrf=False).status_code == 403
    assert web.post(f"/jobs/{job.id}/run_now", {}, csrf=False).status_code == 403
    read_only = make_client(read_only=True)
    assert read_only.post("/limits/set", {"name": "task:x", "rate": "1/s"}).status_code == 403
    assert read_only.post(f"/jobs/{job.id}/run_now", {}).status_code == 403
    assert read_only.post(f"/jobs/{job.id}/edit", {"args": "[]"}).status_code == 403
    assert read_only.post("/workers/1/pool_grow", {}).status_code == 403
    assert web.post("/workers/1/pool_grow", {}, csrf=False).status_code == 403
    assert web.post("/workers/x/pool_grow", {}).status_code == 404
    assert web.post("/workers/1/pool_drop", {}).status_code == 404
    missing = web.post("/workers/424242/pool_grow", {})
    assert missing.status_code == 409 and "no live worker 424242" in missing.text
    assert 'id="change-limit"' not in read_only.get("/limits").text
    page = read_only.get(f"/jobs/{job.id}").text
    assert 'id="run-now"' not in page and 'id="edit-arguments"' not in page
    assert states(app) == {} and job_row(admin, app, job.id)["run_at"] > datetime.now(
        timezone.utc
    ) + timedelta(minutes=30)


def test_run_now_snooze_and_edit_a_pending_job_from_its_page(
    web: Client, app: App, admin: Connection
) -> None:
    @app.task(name="mail.digest", concurrency=1, concurrency_key=lambda user, **_: user)
    def digest(user: str, day: str = "mon") -> None: ...

    job = digest.apply_async(args=["ann"], countdown=3600)
    page = web.get(f"/jobs/{job.id}").text
    assert 'id="run-now"' in page and 'id="edit-arguments"' in page and "Snooze 1 hour" in page

    assert web.post(f"/jobs/{job.id}/snooze", {"seconds": "3600"}).status_code == 303
    snoozed = job_row(admin, app, job.id)
    assert snoozed["run_at"] > datetime.now(timezone.utc) + timedelta(minutes=110)
    assert web.post(f"/jobs/{job.id}/snooze", {"seconds": "7"}).status_code == 400

    response = web.post(f"/jobs/{job.id}/run_now", {})
    assert response.status_code == 303
    assert response.headers["location"] == f"/jobs/{job.id}?done=run-now"
    due = job_row(admin, app, job.id)
    assert due["run_at"] <= datetime.now(timezone.utc) and due["attempts"] == 0
    assert "The job is due now." in web.get(response.headers["location"]).text
    # Due already: nothing to make due.
    assert web.post(f"/jobs/{job.id}/run_now", {}).status_code == 409

    # Edit: checked as an enqueue (signature, JSON), the concurrency key follows the args.
    bad = [
        ({"args": "[1,"}, "args is not JSON"),
        ({"args": '{"user": "bob"}'}, "args must be an array"),
        ({"args": "[]", "kwargs": '{"nobody": 1}'}, "arguments do not match task"),
        ({"args": '["a", "b", "c"]'}, "arguments do not match task"),
    ]
    for form, expected in bad:
        refused = web.post(f"/jobs/{job.id}/edit", form)
        text = html.unescape(refused.text)
        assert refused.status_code == 400 and expected in text, (form, text[-600:])
    response = web.post(f"/jobs/{job.id}/edit", {"args": '["bob"]', "kwargs": '{"day": "tue"}'})
    assert response.status_code == 303, response.text
    edited = job_row(admin, app, job.id)
    assert (edited["args"], edited["kwargs"]) == (["bob"], {"day": "tue"})
    assert edited["limit_key"] == "bob"
    assert edited["limit_groups"] == ["key:mail.digest\x1fbob"]
    rows = controls.read_audit(app, targets=[f"job:{job.id}"])
    assert [row["action"] for row in rows] == ["edit_arguments", "run_now", "snooze"]
    assert rows[0]["before"] == {"args": ["ann"], "kwargs": {}}
    assert rows[0]["actor"] == "dashboard:anonymous@127.0.0.1"


def test_actions_on_a_job_that_is_not_pending_are_refused(
    web: Client, app: App, admin: Connection
) -> None:
    @app.task(name="mail.now")
    def now_task() -> None: ...

    job = now_task.delay()
    admin.execute(
        f"UPDATE \"{app.schema}\".jobs SET status = 'running', attempts = 1 WHERE id = %s",
        [job.id],
    )
    refused = web.post(f"/jobs/{job.id}/edit", {"args": "[]"})
    assert refused.status_code == 409 and "already started" in refused.text
    assert web.post(f"/jobs/{job.id}/run_now", {}).status_code == 409
    assert web.post(f"/jobs/{job.id}/snooze", {"seconds": "300"}).status_code == 409
    assert web.post("/jobs/999999/edit", {"args": "[]"}).status_code == 404
    assert controls.read_audit(app) == []


def test_the_ticked_jobs_are_run_now_or_snoozed_with_counts(
    web: Client, app: App, admin: Connection
) -> None:
    @app.task(name="mail.batch")
    def batch(n: int) -> None: ...

    later = [batch.apply_async(args=[n], countdown=600) for n in range(3)]
    due = batch.delay(9)
    ids = [str(job.id) for job in [*later, due]]
    response = web.post("/jobs/selected", {"action": "run_now", "id": ids})  # type: ignore[dict-item]
    assert response.status_code == 303
    assert "done=selected-run-now&count=3&refused=1" in response.headers["location"]
    page = web.get(response.headers["location"]).text
    assert "Made 3 selected job(s) due now; 1 were not pending later." in page

    response = web.post(
        "/jobs/selected",
        {"action": "snooze", "seconds": "3600", "id": ids},  # type: ignore[dict-item]
    )
    assert "done=selected-snooze&count=4&refused=0" in response.headers["location"]
    for job in [*later, due]:
        assert job_row(admin, app, job.id)["run_at"] > datetime.now(timezone.utc) + timedelta(
            minutes=50
        )


def test_run_now_all_scheduled_matching_a_filter_counts_the_jobs_it_made_due(
    web: Client, app: App, admin: Connection
) -> None:
    @app.task(name="mail.weekly", queue="weekly")
    def weekly(n: int) -> None: ...

    @app.task(name="mail.other", queue="other")
    def other() -> None: ...

    later = [weekly.apply_async(args=[n], countdown=600) for n in range(3)]
    due = weekly.delay(9)
    elsewhere = other.apply_async(countdown=600)
    page = web.get("/jobs?queue=weekly").text
    assert 'id="run-now-matching"' in page
    response = web.post("/jobs/bulk/run_now", {"queue": "weekly"})
    assert response.status_code == 303
    assert response.headers["location"] == "/jobs?queue=weekly&done=bulk-run-now&count=3"
    assert (
        "Made 3 pending job(s) scheduled later due now."
        in web.get(response.headers["location"]).text
    )
    now = datetime.now(timezone.utc)
    assert all(job_row(admin, app, job.id)["run_at"] <= now for job in [*later, due])
    assert job_row(admin, app, elsewhere.id)["run_at"] > now + timedelta(minutes=5)
    assert web.post("/jobs/bulk/run_now", {}).status_code == 400  # never without a filter
    audited = sorted(int(row["target"][4:]) for row in controls.read_audit(app))
    assert audited == sorted(job.id for job in later)


def test_retries_from_the_dashboard_are_audited(web: Client, app: App, admin: Connection) -> None:
    failed = [insert_job(admin, app, status="failed", task="mail.flaky") for _ in range(3)]
    assert web.post(f"/jobs/{failed[0]}/retry", {}).status_code == 303
    ids = [str(failed[1])]
    assert web.post("/jobs/selected", {"action": "retry", "id": ids}).status_code == 303  # type: ignore[dict-item]
    assert web.post("/jobs/bulk/retry", {"task": "mail.flaky"}).status_code == 303
    rows = controls.read_audit(app)
    assert [(row["action"], row["target"]) for row in rows] == [
        ("retry", "jobs:task=mail.flaky"),
        ("retry", f"job:{failed[1]}"),
        ("retry", f"job:{failed[0]}"),
    ]
    assert rows[0]["after"] == {"jobs": 1} and rows[0]["actor"] == "dashboard:anonymous@127.0.0.1"
