"""The finish-and-claim round trip's encoding: outcomes sent as comma-joined text and
binary arrays are stored exactly, the pipeline is one transaction, and the claimed rows
become ClaimedJobs straight from their values."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import psycopg
import pytest

from pgtasks import App
from pgtasks._leases import ClaimedJob, ClaimRequest, Finish
from pgtasks._payload import decode_stored
from pgtasks._retry import Outcome
from pgtasks._store.base import JsonbUndecodedLoader
from pgtasks._store.claims import finish_params
from pgtasks._worker.connection import WORKER_CONNECTION_OPTIONS

WORKER = 10**9
OTHER_WORKER = 10**9 + 1

#: Texts that would need escaping in a text-format array, or split a joined list.
AWKWARD = 'a, "quoted" {braces} \\ back, slash\nnew line, NULL, é ✓'


def test_outcomes_with_awkward_texts_are_stored_exactly(
    app: App, dsn: str, admin: psycopg.Connection[Any]
) -> None:
    @app.task
    def noop() -> None:
        return None

    noop.delay_many([{}] * 4)
    with psycopg.connect(dsn, autocommit=True, options=WORKER_CONNECTION_OPTIONS) as conn:
        claimed = app.queries.claim_jobs(conn, ClaimRequest(WORKER, 4))
        ids = [job.id for job in claimed]
        finishes = [
            Finish(ids[0], WORKER, 1, "done", json.dumps({"text": AWKWARD, "list": [1, 2]})),
            Finish(ids[1], WORKER, 1, "failed", error=AWKWARD),
            Finish(ids[2], WORKER, 1, "pending", error="retry, later", delay=3600.25),
            Finish(ids[3], WORKER, 1, "done", "null", delay=1e-9),
        ]
        # Through the pipeline (finishes and a claim), then the single-statement path.
        trip = app.queries.finish_and_claim_jobs(conn, finishes[:3], ClaimRequest(WORKER, 1))
        assert trip.claimed == []
        accepted = {**trip.written, **app.queries.finish_jobs(conn, finishes[3:])}
    assert accepted == {ids[0]: "done", ids[1]: "failed", ids[2]: "pending", ids[3]: "done"}
    rows = {
        row[0]: row[1:]
        for row in admin.execute(
            f"SELECT id, status, result, last_error, run_at - now() FROM"
            f' "{app.schema}".all_jobs WHERE id = ANY(%s)',
            (ids,),
        ).fetchall()
    }
    assert rows[ids[0]][:3] == ("done", {"text": AWKWARD, "list": [1, 2]}, None)
    assert rows[ids[1]][:3] == ("failed", None, AWKWARD)
    assert rows[ids[2]][:3] == ("pending", None, "retry, later")
    assert dt.timedelta(minutes=59) < rows[ids[2]][3] <= dt.timedelta(seconds=3600.25)
    assert rows[ids[3]][:3] == ("done", None, None)  # JSON null loads as None


def test_the_round_trip_is_one_transaction(
    app: App, dsn: str, admin: psycopg.Connection[Any]
) -> None:
    """The second owner's outcome cannot be stored (not JSON): the first owner's, written
    earlier in the same pipeline, is rolled back with it, and nothing is claimed."""

    @app.task
    def noop() -> None:
        return None

    noop.delay_many([{}] * 3)
    with psycopg.connect(dsn, autocommit=True, options=WORKER_CONNECTION_OPTIONS) as conn:
        (first,) = app.queries.claim_jobs(conn, ClaimRequest(WORKER, 1))
        (second,) = app.queries.claim_jobs(conn, ClaimRequest(OTHER_WORKER, 1))
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):
            app.queries.finish_and_claim_jobs(
                conn,
                [
                    Finish(first.id, WORKER, 1, "done", "null"),
                    Finish(second.id, OTHER_WORKER, 1, "done", "{not json"),
                ],
                ClaimRequest(WORKER, 5),
            )
        assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
    statuses = dict(
        admin.execute(f'SELECT status, count(*) FROM "{app.schema}".all_jobs GROUP BY 1').fetchall()
    )
    assert statuses == {"running": 2, "pending": 1}


def test_claimed_rows_become_claimed_jobs_in_claim_order(app: App, dsn: str) -> None:
    @app.task
    def echo(*args: Any, **kwargs: Any) -> None:
        return None

    low = echo.apply_async((1, "é"), {"key": {"nested": [None]}}, priority=0)
    high = echo.apply_async(priority=5)
    with psycopg.connect(dsn, autocommit=True, options=WORKER_CONNECTION_OPTIONS) as conn:
        jobs = app.queries.finish_and_claim_jobs(conn, (), ClaimRequest(WORKER, 5)).claimed
    assert [job.id for job in jobs] == [high.id, low.id]
    job = jobs[1]
    assert isinstance(job, ClaimedJob)
    assert (job.task_name, job.args, job.kwargs) == (
        echo.name,
        [1, "é"],
        {"key": {"nested": [None]}},
    )
    assert (job.attempt, job.worker_id, job.priority, job.queue) == (1, WORKER, 0, "default")
    assert not job.limited
    assert job.run_at.tzinfo is not None and job.claimed_at >= job.created_at
    assert job == ClaimedJob(**{name: getattr(job, name) for name in vars(job)})


@pytest.mark.parametrize(
    "text", [b"[1, 2.5, true, null]", b'{"a": "\xc3\xa9\\u00e9", "b": {}}', b'"x"', b"{}"]
)
def test_the_claims_payloads_decode_as_json_loads_reads_them(text: bytes) -> None:
    loader = JsonbUndecodedLoader(0)
    for data in (text, memoryview(text)):
        loaded = loader.load(data)
        # [] and {} come decoded, any other text as it is, to be decoded per job.
        assert (decode_stored(loaded) if isinstance(loaded, str) else loaded) == json.loads(text)


def test_finishes_are_written_in_job_id_order_one_statement_per_lease_owner() -> None:
    # Rows, and the workflow successors their trigger updates, are locked in this order:
    # two workers finishing members of the same chords take the callbacks' locks in one
    # order (no deadlock between their batches).
    finishes = [
        Finish(9, 7, 1, "done", "1"),
        Finish(3, 7, 2, "pending", error="boom", delay=1.5, exception_type="builtins.ValueError"),
        Finish(5, 7, 1, "failed", error="no"),
    ]
    (params,) = finish_params(finishes)
    assert params["id"] == "3,5,9"
    assert params["attempt"] == "2,1,1"
    assert params["status"] == "pending,failed,done"
    assert params["error"] == ["boom", "no", None]
    assert params["exception_type"] == ["builtins.ValueError", None, None]
    other = Finish(4, 8, 1, "done", "2")
    assert [params["worker_id"] for params in finish_params([*finishes, other])] == [7, 8]


def test_a_finish_of_a_claimed_job_carries_its_lease_and_the_outcome() -> None:
    now = dt.datetime.now(dt.timezone.utc)
    job = ClaimedJob(3, "t", "q", 0, [], {}, 2, 5, now, now, now, WORKER)
    retry = Finish.of(job, Outcome.retry(1.5, "boom", "builtins.ValueError"))
    done = Finish.of(job, Outcome.done("null"))

    assert retry == Finish(3, WORKER, 2, "pending", None, "boom", 1.5, "builtins.ValueError")
    assert done == Finish(3, WORKER, 2, "done", "null")
