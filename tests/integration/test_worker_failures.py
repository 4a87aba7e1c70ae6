"""In-process Worker when things go wrong: timeouts, unknown tasks, lost leases, rescue,
lost registrations, graceful stop, and outcomes the database refuses.

"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from pgtasks import App, JobContext, JobStatus, Retry
from pgtasks._execution.outcomes import unknown_task_outcome
from pgtasks._leases import ClaimRequest
from tests.support.inprocess import (
    DEFAULT_SETTINGS,
    Gates,
    execute,
    finished,
    is_listening,
    registered_workers,
    running_job_count,
    running_worker,
    select,
)
from tests.support.waiting import stays_true, wait_until

#: A worker id that no worker row has.
LOST_WORKER_ID = 424242

#: Rescue quickly: a 1 s lease, heartbeats every 0.2 s, rescue passes every 0.2 s.
QUICK_RESCUE: dict[str, Any] = {
    "lease_timeout": 1.0,
    "heartbeat_interval": 0.2,
    "rescue_interval": 0.2,
}


@pytest.fixture
def gate() -> Iterator[Gates]:
    gates = Gates()
    yield gates
    gates.open_all()


@pytest.fixture
def worker_warnings(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.WARNING, logger="pgtasks.worker"):
        yield caplog


# -- timeouts --


def test_a_sync_task_past_its_timeout_is_retried_while_its_thread_is_still_blocked(
    app: App, gate: Gates
) -> None:
    release = gate()
    entered: list[int] = []
    returned: list[int] = []

    @app.task(bind=True, timeout=0.3, max_attempts=2, retry_backoff=0.05, retry_jitter=False)
    def stuck(context: JobContext) -> int:
        entered.append(context.attempt)
        if context.attempt == 1:
            release.wait(30)
        returned.append(context.attempt)
        return context.attempt

    with running_worker(app, concurrency=1):
        handle = stuck.delay()
        timed_out = wait_until(
            lambda: (row := handle.fetch()).last_error and row, message="the timeout"
        )
        assert timed_out.status is JobStatus.PENDING
        assert timed_out.attempts == 1
        assert "TimeoutError" in timed_out.last_error
        assert "within its timeout of 0.3 s" in timed_out.last_error
        assert returned == [], "the attempt's thread is still blocked"
        assert entered == [1], "the blocked thread still holds the only slot"

        release.set()
        row = finished(handle)

    assert row.status is JobStatus.DONE
    assert row.attempts == 2
    assert row.result == 2, "the abandoned attempt's late return was not recorded"
    assert sorted(returned) == [1, 2]


def test_an_async_task_past_its_timeout_is_cancelled_and_the_job_fails(app: App) -> None:
    cancelled = threading.Event()

    @app.task(timeout=0.2, max_attempts=1)
    async def slow_download() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    handle = slow_download.delay()
    with running_worker(app):
        row = finished(handle)

    assert cancelled.is_set(), "the coroutine saw CancelledError"
    assert row.status is JobStatus.FAILED
    assert row.attempts == 1
    assert row.last_error is not None
    assert "TimeoutError" in row.last_error


def test_a_timeout_is_recorded_promptly_even_with_a_long_poll_interval(
    app: App, gate: Gates
) -> None:
    release = gate()

    @app.task(timeout=0.2, max_attempts=1)
    def hang() -> None:
        release.wait(30)

    with running_worker(app, poll_interval=5.0):
        handle = hang.delay()
        row = finished(handle, timeout=1.5)

    assert row.status is JobStatus.FAILED
    assert row.last_error is not None
    assert "TimeoutError" in row.last_error


# -- unknown tasks --


def test_leaves_a_job_of_an_unknown_task_pending_and_keeps_running(
    app: App, make_app: Callable[..., App]
) -> None:
    """At default settings a worker claims only the tasks it knows: another app or a newer
    deploy may know the others, so their jobs wait, untouched, for a worker that does."""
    producer = make_app(schema=app.schema, migrate=False)

    @producer.task(name="reports.ghost")
    def ghost() -> None: ...

    @app.task(name="reports.real")
    def real() -> str:
        return "ran"

    with running_worker(app, **DEFAULT_SETTINGS) as worker, app.connection() as conn:
        unknown = ghost.delay()
        known = [finished(real.delay()) for _ in range(3)]
        registered = select(
            conn, app, "SELECT task_names FROM {schema}.workers WHERE id = %s", [worker.worker_id]
        )

    assert [row.status for row in known] == [JobStatus.DONE] * 3
    assert [row.result for row in known] == ["ran"] * 3
    row = unknown.fetch()
    assert (row.status, row.attempts, row.locked_by, row.last_error) == (
        JobStatus.PENDING,
        0,
        None,
        None,
    )
    assert registered == [(["reports.real"],)]


def test_the_ignore_unknown_option_is_still_accepted(
    app: App, make_app: Callable[..., App]
) -> None:
    producer = make_app(schema=app.schema, migrate=False)

    @producer.task(name="reports.ghost")
    def ghost() -> None: ...

    @app.task(name="reports.real")
    def real() -> str:
        return "ran"

    with running_worker(app, ignore_unknown=False):
        unknown = ghost.delay()
        known = finished(real.delay())

    assert known.status is JobStatus.DONE
    assert unknown.fetch().status is JobStatus.PENDING


def test_a_job_of_an_unknown_task_that_reaches_an_executor_is_released_not_failed(
    app: App,
) -> None:
    outcome = unknown_task_outcome("reports.ghost", app)

    assert (outcome.kind, outcome.status) == ("retry", "pending")
    assert outcome.delay > 0
    assert outcome.error is not None
    assert "UnknownTaskError: no task named 'reports.ghost'" in outcome.error


# -- fencing --


@pytest.mark.parametrize(
    "tamper",
    [
        "SET locked_by = locked_by + 1000",
        "SET status = 'pending', run_at = now() + interval '1 hour'",
    ],
    ids=["taken-by-another-worker", "put-back-to-pending"],
)
def test_a_late_outcome_after_the_lease_was_lost_changes_nothing(
    app: App,
    admin: psycopg.Connection[Any],
    gate: Gates,
    worker_warnings: pytest.LogCaptureFixture,
    tamper: str,
) -> None:
    started, release = threading.Event(), gate()

    @app.task
    def hold() -> str:
        started.set()
        release.wait(30)
        return "late result"

    # No rescue pass during the test: the tampered lease must stay as we left it.
    with running_worker(app, rescue_interval=60.0) as worker:
        handle = hold.delay()
        assert started.wait(5)
        changed = execute(
            admin, app, "UPDATE {schema}.jobs " + tamper + " WHERE id = %s", [handle.id]
        )
        assert changed == 1
        before = handle.fetch()
        release.set()
        wait_until(lambda: "lease lost" in worker_warnings.text, message="the lease-lost warning")
        after = handle.fetch()
        assert worker.counts.get("lease_lost") == 1
        assert worker.counts.get("done") is None

    assert after == before
    assert after.result is None
    [message] = [
        record.getMessage()
        for record in worker_warnings.records
        if "lease lost" in record.getMessage()
    ]
    assert f"job {handle.id} " in message
    assert "discarded" in message


# -- rescue --


def test_rescues_a_running_job_whose_worker_is_not_registered(
    app: App, admin: psycopg.Connection[Any], worker_warnings: pytest.LogCaptureFixture
) -> None:
    attempts: list[int] = []

    @app.task(bind=True)
    def import_file(context: JobContext) -> str:
        attempts.append(context.attempt)
        return "imported"

    handle = import_file.delay()
    claimed = app.queries.claim_jobs(admin, ClaimRequest(LOST_WORKER_ID, limit=10))
    assert [job.id for job in claimed] == [handle.id]

    with running_worker(app, **QUICK_RESCUE):
        started = time.monotonic()
        row = finished(handle, timeout=5)
        elapsed = time.monotonic() - started

    assert row.status is JobStatus.DONE
    assert row.attempts == 2
    assert attempts == [2]
    assert elapsed < 1.0, f"rescued and run after {elapsed:.2f} s (rescue interval 0.2 s)"
    assert f"rescued job {handle.id} (attempt 1) from lost worker {LOST_WORKER_ID}" in (
        worker_warnings.text
    )


def test_rescues_a_running_job_of_a_worker_whose_heartbeat_is_older_than_the_lease(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    attempts: list[int] = []

    @app.task(bind=True)
    def import_file(context: JobContext) -> str:
        attempts.append(context.attempt)
        return "imported"

    silent = app.queries.register_worker(
        admin, hostname="silent-host", pid=4242, queues=None, concurrency=1
    )
    handle = import_file.delay()
    app.queries.claim_jobs(admin, ClaimRequest(silent, limit=10))
    execute(
        admin,
        app,
        "UPDATE {schema}.workers SET heartbeat_at = now() - interval '10 seconds' WHERE id = %s",
        [silent],
    )

    with running_worker(app, **QUICK_RESCUE) as worker:
        row = finished(handle, timeout=5)
        wait_until(
            lambda: registered_workers(admin, app) == [worker.worker_id],
            message="the silent worker's registration to be removed",
        )

    assert row.status is JobStatus.DONE
    assert row.attempts == 2
    assert attempts == [2]


def test_fails_a_rescued_job_that_has_no_attempts_left(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    attempts: list[int] = []

    @app.task(bind=True, max_attempts=1)
    def charge_card(context: JobContext) -> None:
        attempts.append(context.attempt)

    handle = charge_card.delay()
    app.queries.claim_jobs(admin, ClaimRequest(LOST_WORKER_ID, limit=10))

    with running_worker(app, **QUICK_RESCUE):
        row = finished(handle, timeout=5)

    assert row.status is JobStatus.FAILED
    assert row.attempts == 1
    assert row.finished_at is not None
    assert row.last_error is not None
    assert f"worker {LOST_WORKER_ID} was lost" in row.last_error
    assert "during attempt 1" in row.last_error
    assert attempts == [], "a job with no attempts left is not run again"


def test_never_rescues_a_long_job_of_a_live_worker(
    app: App, make_app: Callable[..., App], gate: Gates
) -> None:
    started, release = threading.Event(), gate()
    attempts: list[int] = []

    @app.task(bind=True)
    def crunch(context: JobContext) -> str:
        attempts.append(context.attempt)
        started.set()
        release.wait(30)
        return "crunched"

    # A second live worker (another queue) rescues too: it must not take the job either.
    bystander = make_app(schema=app.schema, migrate=False)
    with (
        running_worker(app, **QUICK_RESCUE) as worker,
        running_worker(bystander, queues=["elsewhere"], **QUICK_RESCUE),
    ):
        handle = crunch.delay()
        assert started.wait(5)

        def still_held() -> bool:
            row = handle.fetch()
            return (row.status, row.attempts, row.locked_by) == (
                JobStatus.RUNNING,
                1,
                worker.worker_id,
            )

        assert stays_true(still_held, seconds=3.5), "held for 3.5 leases, never rescued"
        release.set()
        row = finished(handle)

    assert row.status is JobStatus.DONE
    assert row.attempts == 1
    assert row.result == "crunched"
    assert attempts == [1]


# -- registration --


def test_re_registers_when_its_worker_row_is_deleted_and_keeps_processing(
    app: App, admin: psycopg.Connection[Any], worker_warnings: pytest.LogCaptureFixture
) -> None:
    @app.task(bind=True)
    def whoami(context: JobContext) -> int | None:
        return context.worker_id

    # Only the heartbeat notices (a test below covers both services at once).
    with running_worker(app, heartbeat_interval=0.2, rescue_interval=60.0) as worker:
        old_id = worker.worker_id
        deleted = execute(admin, app, "DELETE FROM {schema}.workers WHERE id = %s", [old_id])
        assert deleted == 1
        wait_until(lambda: "re-registered" in worker_warnings.text, message="re-registration")
        row = finished(whoami.delay())
        new_id = worker.worker_id
        assert new_id in registered_workers(admin, app)

    assert new_id != old_id
    assert row.status is JobStatus.DONE
    assert row.result == new_id
    assert f"registration {old_id} was removed" in worker_warnings.text
    assert f"re-registered as {new_id}" in worker_warnings.text


def test_the_heartbeat_and_the_rescuer_re_register_a_removed_worker_only_once(
    app: App,
    admin: psycopg.Connection[Any],
    dsn: str,
    worker_warnings: pytest.LogCaptureFixture,
) -> None:
    with running_worker(app, lease_timeout=30.0, heartbeat_interval=0.2, rescue_interval=0.2) as (
        worker
    ):
        with psycopg.connect(dsn) as locker:
            execute(locker, app, "DELETE FROM {schema}.workers WHERE id = %s", [worker.worker_id])

            def heartbeats_waiting() -> int:
                rows = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE application_name = %s AND wait_event_type = 'Lock'",
                    [f"pgtasks worker {worker.name}"],
                ).fetchall()
                return int(rows[0][0])

            # Both services' heartbeats now wait for the deleted row: commit to let both in.
            wait_until(lambda: heartbeats_waiting() >= 2, message="both heartbeats to wait")
            locker.commit()
        wait_until(lambda: "re-registered" in worker_warnings.text, message="re-registration")

        assert stays_true(lambda: len(registered_workers(admin, app)) == 1, seconds=1.0), (
            f"registrations: {registered_workers(admin, app)}"
        )


# -- graceful stop --


def test_stop_lets_a_job_in_flight_finish_within_the_grace(
    app: App, admin: psycopg.Connection[Any], gate: Gates, caplog: pytest.LogCaptureFixture
) -> None:
    started, release = threading.Event(), gate()

    @app.task
    def send_invoice() -> str:
        started.set()
        release.wait(30)
        return "sent"

    @app.task
    def next_in_line() -> None: ...

    with (
        caplog.at_level(logging.INFO, logger="pgtasks.worker"),
        running_worker(app, concurrency=1) as worker,
    ):
        in_flight = send_invoice.delay()
        assert started.wait(5)
        queued = next_in_line.delay()
        stopper = threading.Thread(target=worker.stop, kwargs={"timeout": 5.0})
        stopping = time.monotonic()
        stopper.start()
        wait_until(lambda: "stopping: waiting up to" in caplog.text, message="the stop to begin")
        release.set()
        stopper.join(10)
        assert not stopper.is_alive()
        assert time.monotonic() - stopping < 5.0, "stop() returned once the job finished"

    row = in_flight.fetch()
    assert (row.status, row.attempts, row.result) == (JobStatus.DONE, 1, "sent")
    waiting = queued.fetch()
    assert (waiting.status, waiting.attempts) == (JobStatus.PENDING, 0), "no claim after stop"
    assert registered_workers(admin, app) == []


def test_stop_past_the_grace_releases_a_blocked_job_without_using_up_its_attempt(
    app: App, admin: psycopg.Connection[Any], gate: Gates
) -> None:
    started, release = threading.Event(), gate()

    @app.task(max_attempts=3)
    def never_ends() -> None:
        started.set()
        release.wait(30)

    with running_worker(app) as worker:
        handle = never_ends.delay()
        assert started.wait(5)
        stopping = time.monotonic()
        worker.stop(timeout=0.2)
        elapsed = time.monotonic() - stopping

    row = handle.fetch()
    assert (row.status, row.attempts) == (JobStatus.PENDING, 0)
    assert row.finished_at is None
    assert running_job_count(admin, app) == 0
    assert registered_workers(admin, app) == []
    assert elapsed < 2.0, f"stop(timeout=0.2) took {elapsed:.2f} s"
    assert worker.counts.get("released") == 1


def test_no_job_is_left_running_after_a_worker_stops(
    app: App, admin: psycopg.Connection[Any], gate: Gates
) -> None:
    release = gate()
    started = threading.Semaphore(0)

    @app.task
    def quick(number: int) -> int:
        return number

    @app.task
    def blocked() -> None:
        started.release()
        release.wait(30)

    with running_worker(app, concurrency=4) as worker:
        quick_jobs = quick.delay_many([{"number": n} for n in range(20)])
        held = [blocked.delay() for _ in range(2)]
        assert started.acquire(timeout=5)
        assert started.acquire(timeout=5)
        worker.stop(timeout=0.2)

    assert running_job_count(admin, app) == 0
    held_rows = app.get_jobs([handle.id for handle in held])
    assert [(row.status, row.attempts) for row in held_rows] == [(JobStatus.PENDING, 0)] * 2
    quick_rows = app.get_jobs([handle.id for handle in quick_jobs])
    assert {row.status for row in quick_rows} <= {JobStatus.DONE, JobStatus.PENDING}


# -- database trouble --


def test_a_job_that_finishes_while_the_connection_is_down_is_recorded_and_not_run_again(
    app: App,
    admin: psycopg.Connection[Any],
    gate: Gates,
    worker_warnings: pytest.LogCaptureFixture,
) -> None:
    started, release = threading.Event(), gate()
    runs: list[int] = []

    @app.task(bind=True)
    def export(context: JobContext) -> str:
        runs.append(context.attempt)
        started.set()
        release.wait(30)
        return "exported"

    # A long poll: nothing but the job's end wakes the claim loop after the claim.
    with running_worker(app, poll_interval=2.0) as worker:
        wait_until(lambda: is_listening(admin, app), message="the worker to LISTEN")
        handle = export.delay()
        assert started.wait(5)
        # Kill the claim loop's connection only: the one whose last statement was the
        # claim (the only statement that sets a job running). Matched by the claim's
        # first line: pg_stat_activity keeps only the first track_activity_query_size
        # bytes (1 kB) of a statement, and the claim's SET comes later than that.
        kill = (
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = %s"
            " AND (query LIKE '-- Claim up to %%' OR query LIKE '-- claim_jobs from %%')"
        )
        application_name = f"pgtasks worker {worker.name}"
        killed = wait_until(
            lambda: admin.execute(kill, [application_name]).fetchall(),
            message="the claim loop's connection",
        )
        # One connection, or both when the loop's second round trip (its own connection,
        # taken while a job runs) last claimed too: each was ended.
        assert killed in ([(True,)], [(True,), (True,)])
        release.set()
        row = finished(handle)

    assert runs == [1], "the job ran once"
    assert (row.status, row.attempts, row.result) == (JobStatus.DONE, 1, "exported")
    assert "lease lost" not in worker_warnings.text


# -- outcomes the database refuses --


def test_an_error_message_with_a_nul_character_does_not_stop_the_worker(app: App) -> None:
    @app.task(max_attempts=1)
    def parse_header() -> None:
        raise ValueError("unexpected byte \x00 in header")

    @app.task
    def after() -> str:
        return "ok"

    with running_worker(app):
        failed = finished(parse_header.delay(), timeout=1.5)
        done = finished(after.delay(), timeout=1.5)

    assert failed.status is JobStatus.FAILED
    assert failed.last_error is not None
    assert "ValueError: unexpected byte" in failed.last_error
    assert done.status is JobStatus.DONE


def test_an_infinite_retry_delay_fails_the_job_instead_of_rerunning_it(app: App) -> None:
    runs: list[int] = []

    @app.task(bind=True, max_attempts=2, retry_backoff=0.05, retry_jitter=False)
    def forever(context: JobContext) -> None:
        runs.append(context.attempt)
        raise Retry(delay=float("inf"))

    with running_worker(app):
        row = finished(forever.delay(), timeout=1.5)

    assert row.status is JobStatus.FAILED
    assert runs == [1, 2]
