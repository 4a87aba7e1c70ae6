"""Batch execution (``batch=Batch(...)``) with a real worker: the handler receives its
jobs' list, per-job outcomes (done, retry, failed) each written fenced by the job's own
lease, claims gather up to max_size or wait up to max_wait; bad options refused."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pgtasks import App, Batch, BatchJob, JobCancelled, TaskFailed, TaskRegistrationError
from pgtasks._leases import ClaimRequest
from pgtasks._payload import MAX_DECODE_DEPTH
from tests.support.inprocess import running_worker, select
from tests.support.waiting import wait_until

Connection = psycopg.Connection[Any]


def _statuses(admin: Connection, app: App) -> dict[str, int]:
    rows = select(admin, app, "SELECT status, count(*) FROM {schema}.all_jobs GROUP BY status")
    return {status: int(count) for status, count in rows}


def test_the_handler_gets_its_jobs_in_batches_and_each_job_its_result(
    app: App, admin: Connection
) -> None:
    sizes: list[int] = []

    @app.task(name="push", batch=Batch(max_size=50, max_wait=timedelta(seconds=0.2)))
    def push(jobs: list[BatchJob]) -> None:
        sizes.append(len(jobs))
        for job in jobs:
            job.done({"sent": job.kwargs["user"], "attempt": job.attempt})

    @app.task(name="plain")
    def plain(n: int) -> int:
        return n

    handles = push.delay_many([{"user": n} for n in range(120)])
    other = plain.delay(7)
    with running_worker(app, concurrency=2):
        assert other.get(timeout=20) == 7
        results = [handle.get(timeout=20) for handle in handles]
    assert results == [{"sent": n, "attempt": 1} for n in range(120)]
    assert sum(sizes) == 120 and max(sizes) <= 50
    assert len(sizes) <= 4  # batches, not jobs one by one
    counters = app.queries.get_counters(admin)
    assert counters.get("batch_jobs") == 120 and counters.get("batches_run") == len(sizes)


def test_one_job_that_raises_is_retried_alone(app: App, admin: Connection) -> None:
    calls: list[list[tuple[int, int]]] = []
    lock = threading.Lock()

    @app.task(
        name="deliver",
        batch=Batch(max_size=500, max_wait=timedelta(seconds=1)),
        max_attempts=3,
        retry_backoff=0.05,
        retry_jitter=False,
    )
    def deliver(jobs: list[BatchJob]) -> None:
        with lock:
            calls.append([(job.kwargs["n"], job.attempt) for job in jobs])
        for job in jobs:
            with job.outcome():
                if job.kwargs["n"] == 250 and job.attempt == 1:
                    raise ConnectionError("push gateway refused n=250")

    handles = deliver.delay_many([{"n": n} for n in range(500)])
    with running_worker(app):
        for handle in handles:
            handle.get(timeout=30)
    ran = [pair for call in calls for pair in call]
    assert sorted(n for n, attempt in ran if attempt == 1) == list(range(500))
    assert [pair for pair in ran if pair[1] > 1] == [(250, 2)]  # only that job, once more
    row = select(
        admin,
        app,
        "SELECT attempts, status, attempt_errors FROM {schema}.all_jobs WHERE id = %s",
        (handles[250].id,),
    )[0]
    assert row[0] == 2 and row[1] == "done"
    assert "push gateway refused n=250" in row[2][0]["error"]
    assert _statuses(admin, app) == {"done": 500}


def test_per_job_decisions_and_a_handler_that_raises(app: App, admin: Connection) -> None:
    @app.task(name="mixed", batch=Batch(max_size=10, max_wait=timedelta(0)), max_attempts=2)
    def mixed(jobs: list[BatchJob]) -> None:
        for job in jobs:
            kind = job.kwargs["kind"]
            if kind == "fail":
                job.fail("bad address")
            elif kind == "retry":
                job.retry(delay=0)
            elif kind == "done":
                job.done("ok")
            elif kind == "unstorable":
                job.done(object())  # not JSON: this job fails alone
        if any(job.kwargs["kind"] == "crash" for job in jobs):
            raise RuntimeError("handler crashed")

    done, failed, retried, unstorable = (
        mixed.delay(kind=kind) for kind in ("done", "fail", "retry", "unstorable")
    )
    with running_worker(app):
        assert done.get(timeout=20) == "ok"
        with pytest.raises(TaskFailed, match="JSON"):
            unstorable.get(timeout=20)
        with pytest.raises(TaskFailed, match="bad address"):
            failed.get(timeout=20)
        with pytest.raises(TaskFailed, match="the last"):
            retried.get(timeout=20)  # retried once, then out of attempts
        crash = mixed.delay(kind="crash")
        with pytest.raises(TaskFailed, match="handler crashed"):
            crash.get(timeout=20)
    assert select(
        admin, app, "SELECT attempts FROM {schema}.all_jobs WHERE id = %s", (crash.id,)
    ) == [(2,)]


def test_a_hostile_row_fails_alone(app: App, admin: Connection) -> None:
    seen: list[int] = []

    @app.task(name="eat", batch=Batch(max_size=10, max_wait=timedelta(0)))
    def eat(jobs: list[BatchJob]) -> None:
        seen.extend(job.id for job in jobs)

    good = eat.delay(1)
    bad = eat.delay(2)
    deep = eat.apply_async(kwargs={"n": 3})
    select(
        admin,
        app,
        "UPDATE {schema}.jobs SET args = jsonb_build_object('not', 'a list') WHERE id = %s"
        " RETURNING id",
        (bad.id,),
    )
    # Nested past what a worker decodes (written by SQL): only its job fails.
    depth = MAX_DECODE_DEPTH + 5
    select(
        admin,
        app,
        "UPDATE {schema}.jobs SET kwargs = %s::jsonb WHERE id = %s RETURNING id",
        ('{"n": ' + "[" * depth + "]" * depth + "}", deep.id),
    )
    with running_worker(app):
        assert good.get(timeout=20) is None
        with pytest.raises(TaskFailed, match="MalformedJobError"):
            bad.get(timeout=20)
        with pytest.raises(TaskFailed, match=r"UndecodableJobError.*kwargs is nested"):
            deep.get(timeout=20)
    assert seen == [good.id]


def test_bad_batch_options_are_refused(app: App) -> None:
    with pytest.raises(ValueError, match="max_size"):
        Batch(max_size=0)
    with pytest.raises(ValueError, match="max_wait"):
        Batch(max_wait=5)  # type: ignore[arg-type]
    with pytest.raises(TaskRegistrationError, match=r"must be a pgtasks\.Batch"):
        app.task(name="b1", batch=500)(lambda jobs: None)  # type: ignore[arg-type]
    with pytest.raises(TaskRegistrationError, match="plain def"):

        @app.task(name="b2", batch=Batch())
        async def b2(jobs: list[BatchJob]) -> None: ...

    with pytest.raises(TaskRegistrationError, match="concurrency="):
        app.task(name="b3", batch=Batch(), concurrency=2)(lambda jobs: None)


def test_a_stopping_worker_lets_its_batch_end_and_writes_it(app: App, admin: Connection) -> None:
    started, release = threading.Event(), threading.Event()

    @app.task(name="slow_batch", batch=Batch(max_size=20, max_wait=timedelta(0)))
    def slow_batch(jobs: list[BatchJob]) -> None:
        started.set()
        release.wait(20)
        for job in jobs:
            job.done(job.args[0])

    handles = slow_batch.delay_many([((n,), {}) for n in range(20)])
    with running_worker(app) as worker:
        assert started.wait(20)
        stopper = threading.Thread(target=worker.stop)
        stopper.start()
        wait_until(worker._stop_requested.is_set, message="the stop to begin")
        release.set()
        stopper.join(30)
    assert [handle.get(timeout=5) for handle in handles] == list(range(20))
    assert select(admin, app, "SELECT DISTINCT attempts FROM {schema}.all_jobs") == [(1,)]


def test_eager_mode_calls_the_handler_with_the_one_job(make_app: Any) -> None:
    eager = make_app(migrate=False, eager=True)

    @eager.task(name="eager_batch", batch=Batch(max_size=10))
    def eager_batch(jobs: list[BatchJob]) -> None:
        for job in jobs:
            if job.kwargs["n"] < 0:
                job.fail("negative")
            else:
                job.done(job.kwargs["n"] * 2)

    assert eager_batch.delay(n=21).get() == 42
    with pytest.raises(TaskFailed, match="negative"):
        eager_batch.delay(n=-1).get()


def test_a_claim_waits_up_to_max_wait_for_more_jobs_to_fill_its_batch(
    app: App, admin: Connection
) -> None:
    sizes: list[int] = []

    @app.task(name="gather", batch=Batch(max_size=5, max_wait=timedelta(seconds=30)))
    def gather(jobs: list[BatchJob]) -> None:
        sizes.append(len(jobs))

    first = gather.delay(0)
    with running_worker(app):
        wait_until(lambda: first.status().value == "running", message="the first job's claim")
        rest = gather.delay_many([{"n": n} for n in range(1, 5)])
        for handle in [first, *rest]:
            handle.get(timeout=20)  # well before max_wait: the batch filled up
    assert sizes == [5]


def test_jobs_of_a_batch_claim_whose_reply_was_lost_are_released(
    app: App, admin: Connection
) -> None:
    @app.task(name="orphaned", batch=Batch(max_size=10, max_wait=timedelta(0)))
    def orphaned(jobs: list[BatchJob]) -> None: ...

    @app.task(name="plain_held")
    def plain_held() -> None: ...

    batch_jobs = orphaned.delay_many([{"n": n} for n in range(3)])
    plain = plain_held.delay()
    with app.connection() as conn:
        worker = app.queries.register_worker(conn, hostname="h", pid=1, queues=None, concurrency=1)
        # A claim of the batch service that committed, its reply lost; and a job of the
        # claim loop, which must stay held.
        claimed = app.queries.claim_jobs(conn, ClaimRequest(worker, 10, task_names=("orphaned",)))
        held = app.queries.claim_jobs(conn, ClaimRequest(worker, 10, task_names=("plain_held",)))
        released = app.queries.release_orphaned_batch_jobs(
            conn, worker_id=worker, task_names=["orphaned"], known_ids=[claimed[0].id]
        )
    assert released == {job.id for job in batch_jobs[1:]}
    rows = dict(select(admin, app, "SELECT id, status || ':' || attempts FROM {schema}.jobs"))
    assert rows[batch_jobs[0].id] == "running:1" and rows[held[0].id] == "running:1"
    assert rows[batch_jobs[1].id] == rows[batch_jobs[2].id] == "pending:0"
    assert plain.id == held[0].id


def test_a_job_cancelled_while_its_batch_runs_ends_cancelled(app: App) -> None:
    started, release = threading.Event(), threading.Event()

    @app.task(name="cancellable", batch=Batch(max_size=10, max_wait=timedelta(0)))
    def cancellable(jobs: list[BatchJob]) -> None:
        started.set()
        release.wait(20)

    handles = cancellable.delay_many([{"n": n} for n in range(3)])
    with running_worker(app):
        assert started.wait(20)
        handles[0].cancel()
        release.set()
        with pytest.raises(JobCancelled):
            handles[0].get(timeout=20)
        assert [handle.get(timeout=20) for handle in handles[1:]] == [None, None]


def test_one_writer_thread_writes_every_batch_and_ends_with_the_worker(app: App) -> None:
    @app.task(name="written", batch=Batch(max_size=2, max_wait=timedelta(0)))
    def written(jobs: list[BatchJob]) -> None: ...

    def writers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "pgtasks-batch-writer"]

    handles = written.delay_many([{"n": n} for n in range(6)])
    with running_worker(app):
        for handle in handles:
            assert handle.get(timeout=20) is None
        assert len(writers()) == 1  # the three batches' (or more), one thread: still there
    wait_until(lambda: not writers(), message="the writer thread to end with the worker")
