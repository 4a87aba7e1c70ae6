"""The dashboard's Delete and Retry never break a workflow: a job an unfinished workflow
still needs is not deleted, a step that cannot get its input back is not retried (409,
naming the workflow); a bulk retry gives cancelled steps their input back."""

from __future__ import annotations

from typing import Any

import psycopg

from pgtasks import App, chain
from tests.support.inprocess import select
from tests.support.web import Client
from tests.support.workflows import settle


def status_of(admin: psycopg.Connection[Any], app: App, job_id: int) -> str | None:
    rows = select(admin, app, "SELECT status FROM {schema}.all_jobs WHERE id = %s", [job_id])
    return rows[0][0] if rows else None


def test_delete_and_retry_answer_409_naming_the_workflow(
    web: Client, app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    workflow = chain(add.s(1, 2), add.s(3), add.s(4)).delay()
    first, second, third = (job["id"] for job in app.get_workflow(workflow.id)["jobs"])
    settle(app, {first: 3})

    refused = web.post(f"/jobs/{first}/delete")
    assert refused.status_code == 409
    assert f"step 0 of workflow {workflow.id}, which has not finished" in refused.text
    assert status_of(admin, app, first) == "done"

    settle(app, {second: RuntimeError("boom")})
    refused = web.post(f"/jobs/{third}/retry")
    assert refused.status_code == 409
    assert f"is step 2 of workflow {workflow.id} and never received its input" in refused.text
    assert status_of(admin, app, third) == "cancelled"

    # The bulk retry of what failed or was cancelled: the failed step runs again, the
    # cancelled one waits for it again and then gets its input.
    response = web.post("/jobs/bulk/retry", {"queue": "default"})
    assert response.status_code == 303
    assert "count=2" in response.headers["location"]
    assert (status_of(admin, app, second), status_of(admin, app, third)) == ("pending", "waiting")
    settle(app, {second: 6})
    assert select(
        admin, app, "SELECT status, args FROM {schema}.all_jobs WHERE id = %s", [third]
    ) == [("pending", [6, 4])]

    workflow.cancel()
    assert web.post(f"/jobs/{first}/delete").status_code == 303
    assert status_of(admin, app, first) is None
