"""Paused queues (migration 0007): app.pause_queue/resume_queue/paused_queues, and real
Workers that leave a paused queue alone while its running jobs finish."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from pgtasks import App, JobStatus
from tests.support.inprocess import Gates, finished, running_worker, select
from tests.support.waiting import wait_until


def test_pause_and_resume_report_whether_they_changed_anything(app: App) -> None:
    assert app.paused_queues() == []
    assert app.pause_queue("emails") is True
    assert app.pause_queue("emails") is False
    assert app.pause_queue("bulk") is True
    assert app.paused_queues() == ["bulk", "emails"]
    assert app.resume_queue("emails") is True
    assert app.resume_queue("emails") is False
    assert app.paused_queues() == ["bulk"]


@pytest.mark.parametrize("name", ["", "   ", "a\x00b", 42, "x" * 1000])
def test_a_bad_queue_name_is_refused_with_a_clear_error(app: App, name: Any) -> None:
    with pytest.raises(ValueError, match="queue"):
        app.pause_queue(name)
    with pytest.raises(ValueError, match="queue"):
        app.resume_queue(name)
    assert app.paused_queues() == []


def test_resume_wakes_the_workers_of_the_queue(app: App, admin: psycopg.Connection[Any]) -> None:
    admin.execute(f'LISTEN "{app.queries.channel}"')
    app.pause_queue("emails")
    app.resume_queue("emails")
    payloads = [notify.payload for notify in admin.notifies(timeout=5, stop_after=1)]
    assert payloads == ["emails"]


@pytest.mark.parametrize(
    "queues",
    [None, ["emails", "default"]],
    ids=["worker of every queue", "worker of named queues"],
)
def test_a_paused_queue_is_not_claimed_its_running_job_finishes_and_resume_claims_it(
    app: App, queues: list[str] | None
) -> None:
    gates = Gates()
    started: list[str] = []
    hold = gates()

    @app.task(queue="emails")
    def send(label: str) -> str:
        started.append(label)
        if label == "running":
            hold.wait(10)
        return label

    @app.task(queue="default")
    def other(label: str) -> str:
        started.append(label)
        return label

    try:
        with running_worker(app, queues=queues, concurrency=4) as worker:
            running = send.delay("running")
            wait_until(lambda: running.status() == JobStatus.RUNNING, message="the first job")

            app.pause_queue("emails")
            wait_until(
                lambda: worker.paused_queues == frozenset({"emails"}),
                timeout=5,
                message="the worker to read the paused queues",
            )
            held = send.delay("held")
            # Enqueued after the held job, so it sorts behind it: claimed while the held
            # job is not, it shows that the paused queue was left out of the claim.
            behind = other.delay("behind")
            assert finished(behind).status == JobStatus.DONE
            assert held.status() == JobStatus.PENDING

            # The job that was running when the queue was paused finishes.
            hold.set()
            assert finished(running).status == JobStatus.DONE
            assert held.status() == JobStatus.PENDING

            app.resume_queue("emails")
            assert finished(held).status == JobStatus.DONE
            assert worker.paused_queues == frozenset()
    finally:
        gates.open_all()
    assert started == ["running", "behind", "held"]


def test_a_worker_whose_every_queue_is_paused_claims_nothing_until_resumed(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task(queue="emails")
    def send() -> None:
        return None

    @app.task(queue="default")
    def other() -> None:
        return None

    app.pause_queue("emails")
    with (
        running_worker(app, queues=["emails"]) as paused_worker,
        running_worker(app, queues=["default"]) as other_worker,
    ):
        wait_until(
            lambda: paused_worker.paused_queues == frozenset({"emails"}),
            message="the worker to read the paused queues",
        )
        held = send.delay()
        # The paused worker was notified of it; the other worker's job, enqueued later,
        # runs meanwhile.
        assert finished(other.delay()).status == JobStatus.DONE
        assert held.status() == JobStatus.PENDING
        assert other_worker.counts.get("claimed", 0) == 1
        rows = select(
            admin, app, "SELECT locked_by FROM {schema}.all_jobs WHERE id = %s", [held.id]
        )
        assert rows == [(None,)]

        app.resume_queue("emails")
        assert finished(held).status == JobStatus.DONE


def test_a_queue_paused_before_the_worker_starts_is_never_claimed(app: App) -> None:
    ran = threading.Event()

    @app.task(queue="emails")
    def send() -> None:
        ran.set()

    @app.task(queue="default")
    def other() -> None:
        return None

    app.pause_queue("emails")
    held = send.delay()
    with running_worker(app) as worker:
        # The worker read the paused queues before its first claim.
        assert worker.paused_queues == frozenset({"emails"})
        assert finished(other.delay()).status == JobStatus.DONE
        assert held.status() == JobStatus.PENDING
        app.resume_queue("emails")
        assert finished(held).status == JobStatus.DONE
    assert ran.is_set()
