"""A history day partition dropped while its jobs are retried, and ``purge`` racing a
worker: every job has exactly one fate, and nothing fails but with a clear error.

- The pruner drops a day partition of jobs_history (its keys first, then detach and drop
  under a 1 s lock timeout) while operators retry the failed jobs in it: each retry either
  moves the job back to jobs (it is pending there, and runs) or says the job does not exist
  (it went with the partition), never both, never another error.
- ``purge`` (batches of deletes of pending jobs) while a worker claims from the same
  queue: each job is either run once or deleted, never both, and purge's count is the
  number deleted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import errors, sql

from pgtasks import App, JobNotFoundError, JobStatus
from tests.support.inprocess import running_worker
from tests.support.waiting import wait_until

Connection = psycopg.Connection[Any]


def todays_partition(admin_conn: Connection, schema: str, history_class: str) -> str:
    row = admin_conn.execute(
        sql.SQL(
            "SELECT partition_name FROM {}.jobs_history_expired_days(%s, now() + interval '3 days')"
            " WHERE partition_day = (now() AT TIME ZONE 'UTC')::date"
        ).format(sql.Identifier(schema)),
        (history_class,),
    ).fetchone()
    assert row is not None, "no day partition for today"
    return str(row[0])


def where_is(admin_conn: Connection, schema: str, ids: list[int]) -> dict[int, str]:
    rows = admin_conn.execute(
        sql.SQL(
            "SELECT id, 'jobs:' || status FROM {}.jobs WHERE id = ANY(%s)"
            " UNION ALL SELECT id, 'history:' || status FROM {}.jobs_history WHERE id = ANY(%s)"
        ).format(sql.Identifier(schema), sql.Identifier(schema)),
        (ids, ids),
    ).fetchall()
    found: dict[int, str] = {}
    for job_id, place in rows:
        assert job_id not in found, f"job {job_id} is in two places: {found[job_id]}, {place}"
        found[job_id] = place
    return found


def test_retries_racing_the_drop_of_their_history_partition(
    make_app: Callable[..., App], admin: Connection
) -> None:
    app = make_app()

    @app.task(name="race.fails", max_attempts=1)
    def fails(n: int) -> None:
        raise RuntimeError(f"failure {n}")

    with app.database.connect() as conn:
        app.queries.prepare_history_days(conn)  # today's partitions, as migrate or the pruner
    ids = [handle.id for handle in fails.delay_many([{"n": n} for n in range(300)])]
    with running_worker(app, concurrency=8):
        wait_until(
            lambda: {row.status for row in app.get_jobs(ids)} == {JobStatus.FAILED},
            timeout=60,
            message="the jobs failed",
        )
    partition = todays_partition(admin, app.schema, "failed")
    assert set(where_is(admin, app.schema, ids).values()) == {"history:failed"}

    outcomes: dict[int, str] = {}
    unexpected: list[BaseException] = []
    start = threading.Barrier(5)

    def retry(shard: list[int]) -> None:
        start.wait()
        for job_id in shard:
            try:
                retried = app.admin.retry_job(job_id).retried
                outcomes[job_id] = "retried" if retried else "refused"
            except JobNotFoundError:
                outcomes[job_id] = "gone"
            except BaseException as error:
                unexpected.append(error)

    threads = [threading.Thread(target=retry, args=(ids[index::4],)) for index in range(4)]
    for thread in threads:
        thread.start()
    start.wait()
    with app.database.connect() as conn:
        # As the pruner: a lock not granted within 1 s is tried again on its next pass.
        while True:
            try:
                app.queries.drop_history_day(conn, history_class="failed", partition=partition)
                break
            except errors.LockNotAvailable:
                continue
    for thread in threads:
        thread.join(60)

    assert not unexpected, [repr(error) for error in unexpected[:5]]
    assert set(outcomes) == set(ids) and set(outcomes.values()) <= {"retried", "gone"}
    places = where_is(admin, app.schema, ids)
    retried = sorted(job_id for job_id, outcome in outcomes.items() if outcome == "retried")
    gone = sorted(job_id for job_id, outcome in outcomes.items() if outcome == "gone")
    assert {job_id: places.get(job_id) for job_id in retried} == dict.fromkeys(
        retried, "jobs:pending"
    )
    assert not set(gone) & set(places), "a job said gone is still there"
    print(f"retried before the drop: {len(retried)}; gone with the partition: {len(gone)}")


def test_purge_racing_a_worker_deletes_or_runs_each_job_once(
    make_app: Callable[..., App], admin: Connection
) -> None:
    app = make_app()
    ran: list[int] = []
    lock = threading.Lock()

    @app.task(name="race.work", bind=True, queue="race")
    def work(context: Any) -> None:
        with lock:
            ran.append(context.job_id)

    ids = [handle.id for handle in work.delay_many([{}] * 3000)]
    count = app.admin.count_purgeable("race", None)
    assert count.jobs == 3000
    with running_worker(app, concurrency=4):
        wait_until(lambda: len(ran) >= 50, message="the worker running jobs")
        deleted = app.admin.purge_jobs("race", None, count.max_id)
        wait_until(
            lambda: not [row for row in app.get_jobs(ids) if row.status != JobStatus.DONE],
            timeout=60,
            message="what purge left to finish",
        )
    places = where_is(admin, app.schema, ids)
    assert len(ran) == len(set(ran)), "a job ran twice"
    assert set(ran) == set(places), "a job ran and was deleted, or was kept and never ran"
    assert set(places.values()) == {"history:done"}
    assert deleted == len(ids) - len(ran) and deleted > 0
    print(f"purge deleted {deleted} of {len(ids)} jobs while the worker ran {len(ran)}")
