"""Start deadlines (``expires=``) and callbacks (``link=``, ``link_error=``) of the native
API, against a real worker: an expired job never runs and ends cancelled with the reason,
callbacks run once as jobs, bad input is refused before anything is written."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from pgtasks import App, JobCancelled, JobStatus, NaiveDatetimeError, WorkflowError
from pgtasks._leases import ClaimRequest
from pgtasks._worker.connection import WORKER_CONNECTION_OPTIONS
from tests.support.inprocess import execute, running_worker, select
from tests.support.waiting import wait_until


@pytest.fixture
def tasks(app: App) -> dict[str, Any]:
    ran: list[Any] = []
    lock = threading.Lock()

    @app.task(name="record")
    def record(value: Any) -> Any:
        with lock:
            ran.append(value)
        return value

    @app.task(name="double")
    def double(value: int) -> int:
        return value * 2

    @app.task(name="note")
    def note(*values: Any) -> list[Any]:
        with lock:
            ran.append(("note", *values))
        return list(values)

    @app.task(name="boom", max_attempts=1)
    def boom(value: Any) -> None:
        raise ValueError(f"bad value {value!r}")

    @app.task(name="short_lived", expires=timedelta(seconds=-1))
    def short_lived() -> str:
        with lock:
            ran.append("short_lived")
        return "ran"

    return {
        "ran": ran,
        "record": record,
        "double": double,
        "note": note,
        "boom": boom,
        "short_lived": short_lived,
    }


def _status(app: App, job_id: int) -> JobStatus:
    return app.get_job(job_id).status()


def test_a_job_past_its_deadline_never_runs_and_ends_cancelled_as_expired(
    app: App, tasks: dict[str, Any]
) -> None:
    past = datetime.now(timezone.utc) - timedelta(seconds=1)
    expired = tasks["record"].apply_async(("late",), expires=past)
    by_seconds = tasks["record"].apply_async(("late too",), expires=-0.5)
    by_default = tasks["short_lived"].delay()
    kept = tasks["record"].apply_async(("on time",), expires=timedelta(hours=1))

    assert kept.fetch().meta["pgtasks.expires"] > datetime.now(timezone.utc).timestamp()
    with running_worker(app):
        assert kept.get(timeout=10) == "on time"
        for handle in (expired, by_seconds, by_default):
            with pytest.raises(JobCancelled):
                handle.get(timeout=10)
            row = handle.fetch()
            assert row.status == "cancelled"
            assert row.last_error is not None and "expired" in row.last_error
            assert row.attempts == 0
    assert tasks["ran"] == ["on time"]


def test_the_claim_never_picks_an_expired_row(app: App, dsn: str, tasks: dict[str, Any]) -> None:
    expired = tasks["record"].apply_async(("late",), expires=-1)
    fresh = tasks["record"].apply_async(("fresh",))
    with psycopg.connect(dsn, autocommit=True, options=WORKER_CONNECTION_OPTIONS) as conn:
        claimed = app.queries.claim_jobs(conn, ClaimRequest(10**9, 10))
    assert [job.id for job in claimed] == [fresh.id]
    assert _status(app, expired.id) == "pending"


def test_a_hand_written_deadline_that_is_no_number_expires_the_job_and_stops_nothing(
    app: App, admin: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    hostile = tasks["record"].delay("hostile")
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET meta = meta || %s::jsonb WHERE id = %s",
        ('{"pgtasks.expires": "soon"}', hostile.id),
    )
    other = tasks["record"].delay("other")
    with running_worker(app):
        assert other.get(timeout=10) == "other"
        wait_until(lambda: _status(app, hostile.id) == "cancelled", message="the expiry")
    assert tasks["ran"] == ["other"]


def test_an_expired_workflow_step_is_treated_as_a_cancelled_one(
    app: App, admin: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    first = tasks["record"].apply_async((1,), expires=-1, link=tasks["note"].s("after"))
    with running_worker(app):
        with pytest.raises(JobCancelled):
            first.get(timeout=10)
        wait_until(
            lambda: (
                select(admin, app, "SELECT status FROM {schema}.all_jobs WHERE task_name = 'note'")
                == [("cancelled",)]
            ),
            message="the linked step cancelled",
        )
    assert tasks["ran"] == []


def test_link_runs_the_callback_with_the_result_and_link_error_with_the_failure(
    app: App, tasks: dict[str, Any]
) -> None:
    with running_worker(app):
        linked = tasks["double"].apply_async(
            (21,), link=[tasks["note"].s("mutable"), tasks["note"].si("immutable")]
        )
        assert linked.get(timeout=10) == 42
        wait_until(lambda: len(tasks["ran"]) == 2, message="both callbacks")
        assert sorted(map(repr, tasks["ran"])) == sorted(
            [repr(("note", 42, "mutable")), repr(("note", "immutable"))]
        )
        tasks["ran"].clear()

        failing = tasks["boom"].apply_async(
            (7,), link=tasks["note"].s("never"), link_error=tasks["note"].s("errback")
        )
        wait_until(lambda: len(tasks["ran"]) == 1, message="the error callback")
        (entry,) = tasks["ran"]
        assert entry[0] == "note" and entry[2] == "errback"
        failure = entry[1]
        assert failure["job_id"] == failing.id
        assert failure["task_name"] == "boom"
        assert failure["status"] == "failed"
        assert "ValueError: bad value 7" in failure["error"]
        assert _status(app, failing.id) == "failed"


def test_bad_expires_and_callbacks_are_refused_before_anything_is_written(
    app: App, admin: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    record = tasks["record"]
    with pytest.raises(NaiveDatetimeError):
        record.apply_async((1,), expires=datetime.now())
    with pytest.raises(TypeError, match="expires must be seconds"):
        record.apply_async((1,), expires="soon")
    with pytest.raises(ValueError, match="finite"):
        record.apply_async((1,), expires=float("inf"))
    with pytest.raises(WorkflowError, match="link= must be a signature"):
        record.apply_async((1,), link="note")
    with pytest.raises(ValueError, match="idempotency_key cannot be combined with link="):
        record.apply_async((1,), idempotency_key="k", link=tasks["note"].s())
    with pytest.raises(NaiveDatetimeError):
        record.apply_async((1,), eta=datetime.now(), link=tasks["note"].s())
    with pytest.raises(ValueError, match="countdown= or eta="):
        record.apply_async((1,), countdown=1, eta=timedelta(1), link=tasks["note"].s())
    with pytest.raises(WorkflowError, match="one error callback"):
        record.apply_async((1,), link_error=[tasks["note"].s(), tasks["note"].s()])
    assert select(admin, app, "SELECT count(*) FROM {schema}.all_jobs") == [(0,)]


def test_countdown_and_eta_combine_with_link(
    app: App, admin: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    later = tasks["double"].apply_async((1,), countdown=3600, link=tasks["note"].s("later"))
    at = datetime.now(timezone.utc) + timedelta(hours=2)
    by_eta = tasks["double"].apply_async((2,), eta=at, link_error=tasks["note"].s())
    soon = tasks["double"].apply_async((3,), countdown=0.2, link=tasks["note"].s("soon"))

    ((lead,),) = select(
        admin,
        app,
        "SELECT extract(epoch FROM run_at - created_at)::float8 FROM {schema}.jobs WHERE id = %s",
        (later.id,),
    )
    assert 3600 <= lead < 3660  # the database's clock, as countdown= always is
    assert abs((by_eta.fetch().run_at - at).total_seconds()) < 0.001
    with running_worker(app):
        assert soon.get(timeout=10) == 6
        wait_until(lambda: ("note", 6, "soon") in tasks["ran"], message="the callback")
    assert later.status() == "pending" and by_eta.status() == "pending"
    assert ("note", 2, "later") not in tasks["ran"]
