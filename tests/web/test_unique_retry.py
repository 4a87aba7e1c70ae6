"""The dashboard's retries of jobs unique while active whose key another job holds."""

from __future__ import annotations

from pgtasks import App
from tests.support.web import Client


def test_retry_of_a_job_whose_key_is_held_is_refused_with_409(web: Client, app: App) -> None:
    @app.task(name="sync", unique_while="active", unique_key=lambda n: f"sync:{n}")
    def sync(n: int) -> None: ...

    cancelled = sync.delay(1)
    cancelled.cancel()
    holder = sync.apply_async([1], countdown=3600)
    twin_a = sync.delay(2)
    twin_a.cancel()
    twin_b = sync.delay(2)
    twin_b.cancel()

    refused = web.post(f"/jobs/{cancelled.id}/retry")
    assert refused.status_code == 409
    assert f"held by pending job {holder.id}" in refused.text
    assert cancelled.status().value == "cancelled"

    bulk = web.post("/jobs/bulk/retry", {"status": "cancelled", "task": "sync"})
    assert bulk.status_code == 409
    assert "several of the jobs share a unique key" in bulk.text
