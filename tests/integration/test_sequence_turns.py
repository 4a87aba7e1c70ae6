"""A sequence's turn handed over once per statement that ended jobs (migration
sequence_turns), a retried sequence job back in its sequence, and the release and reads of
sequences on an App of several stores."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pgtasks import App, flow_state, release_sequence
from pgtasks._leases import ClaimedJob, ClaimPosition, ClaimRequest, Finish
from pgtasks._retry import Outcome
from pgtasks._store.claims import claim_statement


def _worker(app: App) -> int:
    with app.connection() as conn:
        return app.queries.register_worker(conn, hostname="h", pid=1, queues=None, concurrency=8)


def _claim(app: App, worker_id: int, limit: int = 50) -> list[ClaimedJob]:
    with app.connection() as conn:
        return list(
            app.queries.finish_and_claim_jobs(conn, (), ClaimRequest(worker_id, limit)).claimed
        )


def _end(app: App, jobs: list[ClaimedJob], outcome: Outcome | None = None) -> None:
    with app.connection() as conn:
        app.queries.finish_jobs(
            conn, [Finish.of(job, outcome or Outcome.done("null")) for job in jobs]
        )


def _statuses(admin: psycopg.Connection[Any], schema: str) -> dict[int, str]:
    rows = admin.execute(f"SELECT id, status FROM {schema}.all_jobs ORDER BY id")
    return dict(rows.fetchall())


def test_one_finish_hands_over_the_turns_of_many_keys(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task(sequence_key=lambda key, n: key)
    def step(key: str, n: int) -> None: ...

    # Keys whose text a JSON list or a comma would break, three jobs each.
    keys = ["a", "b,c", 'd"e', "f\\g", "ü h", "["]
    handles = {key: [step.delay(key, n).id for n in range(3)] for key in keys}
    worker = _worker(app)
    for turn in range(3):
        claimed = _claim(app, worker)
        # Exactly one job of each key, the next in enqueue order.
        assert sorted(job.id for job in claimed) == sorted(ids[turn] for ids in handles.values())
        _end(app, claimed)  # one finish statement for every key
    statuses = _statuses(admin, app.schema)
    assert {statuses[i] for ids in handles.values() for i in ids} == {"done"}
    # Nothing was left noted for a later statement of the transaction.
    with app.connection() as conn:
        row = conn.execute("SELECT current_setting('pgtasks.sequence_ended', true)").fetchone()
    assert row is not None and not row[0]


def test_a_retried_cancelled_waiting_job_waits_for_its_turn(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task(sequence_key="s")
    def step(n: int) -> None: ...

    ids = [step.delay(n).id for n in range(3)]
    assert app.cancel(ids[1]).outcome == "cancelled"  # waiting: never ran
    worker = _worker(app)
    head = _claim(app, worker)
    assert [job.id for job in head] == ids[:1]
    # Retried while the head runs: it waits (before, it was pending at once and ran
    # beside the head, ahead of the jobs enqueued before it had ended).
    assert app.admin.retry_job(ids[1]).retried
    assert _statuses(admin, app.schema)[ids[1]] == "waiting"
    assert _claim(app, worker) == []
    _end(app, head)
    # Its enqueue order: before job 3, enqueued after it.
    claimed = _claim(app, worker)
    assert [job.id for job in claimed] == [ids[1]]
    assert _statuses(admin, app.schema)[ids[2]] == "waiting"
    _end(app, claimed)
    assert [job.id for job in _claim(app, worker)] == [ids[2]]


def test_a_retried_job_of_an_idle_sequence_starts_at_once(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task(sequence_key="s", sequence_on_failure="continue", max_attempts=1)
    def step(n: int) -> None: ...

    first = step.delay(1).id
    worker = _worker(app)
    _end(app, _claim(app, worker), Outcome.failed("boom"))
    assert _statuses(admin, app.schema)[first] == "failed"
    # Nothing runs or waits in its sequence: the retried job is its head at once.
    assert app.admin.retry_job(first).retried
    assert _statuses(admin, app.schema)[first] == "pending"
    assert [job.id for job in _claim(app, worker)] == [first]


@pytest.fixture
def stores_app(make_stores_app: Callable[..., App]) -> App:
    return make_stores_app(routes={"bulk_queue": "bulk"})


def _hold(app: App, task: Any) -> list[int]:
    """Two jobs of sequence "s" in ``app``'s store, the first failed: it holds the second."""
    ids = [task.delay(n).id for n in range(2)]
    worker = _worker(app)
    _end(app, _claim(app, worker), Outcome.failed("boom"))
    return ids


def test_release_and_flow_state_cover_every_store_or_the_one_named(
    stores_app: App, admin: psycopg.Connection[Any]
) -> None:
    @stores_app.task(name="here", sequence_key="s", max_attempts=1)
    def here(n: int) -> None: ...

    @stores_app.task(name="there", sequence_key="s", max_attempts=1, queue="bulk_queue")
    def there(n: int) -> None: ...

    default, bulk = stores_app.for_store("default"), stores_app.for_store("bulk")
    here_ids, there_ids = _hold(default, here), _hold(bulk, there)
    schemas = stores_app.schemas  # type: ignore[attr-defined]

    # Every store's held sequences, each naming its store; or one store's.
    state = flow_state(stores_app)
    assert sorted((s.store, s.key, s.held_by) for s in state.held) == [
        ("bulk", "s", there_ids[0]),
        ("default", "s", here_ids[0]),
    ]
    assert sorted(row["store"] for row in state.as_dict()["sequences"]) == ["bulk", "default"]
    only_bulk = flow_state(stores_app, queue="bulk_queue")
    assert [(s.key, s.held_by, s.store) for s in only_bulk.held] == [("s", there_ids[0], None)]
    assert "store" not in only_bulk.as_dict()["sequences"][0]
    assert [s.held_by for s in flow_state(stores_app, store="default").held] == [here_ids[0]]
    with pytest.raises(ValueError, match="give one of them"):
        flow_state(stores_app, store="bulk", queue="bulk_queue")

    # Released in the store named: its next job starts, the other store's stays held.
    assert release_sequence(stores_app, "s", store="bulk") == there_ids[1]
    assert _statuses(admin, schemas["bulk"])[there_ids[1]] == "pending"
    assert _statuses(admin, schemas["default"])[here_ids[1]] == "waiting"
    # Without store= or queue=, the root App releases the key in every store.
    assert release_sequence(stores_app, "s") == here_ids[1]
    assert _statuses(admin, schemas["default"])[here_ids[1]] == "pending"
    assert flow_state(stores_app).held == []


def test_the_sweep_moves_on_missed_turns_and_locks_only_those_keys(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task(sequence_key=lambda key, n: key)
    def step(key: str, n: int) -> None: ...

    missed = [step.delay("missed", n).id for n in range(2)]
    busy = [step.delay(f"busy-{k}", n).id for k in range(3) for n in range(2)]
    # A head deleted by hand: nothing ends its turn, the key's next job waits.
    admin.execute(f"DELETE FROM {app.schema}.jobs WHERE id = %s", (missed[0],))
    with app.connection() as conn, conn.transaction():
        assert app.queries.sequence_sweep(conn) == 1
        locks = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
            " AND pid = pg_backend_pid() AND classid = 1885828224"
        ).fetchone()
        # Only the key without a head was locked (the busy ones' finishes go on).
        assert locks == (1,)
    statuses = _statuses(admin, app.schema)
    assert statuses[missed[1]] == "pending"
    assert [statuses[i] for i in busy] == ["pending", "waiting"] * 3


def test_a_keys_turn_in_one_schema_never_waits_for_the_same_key_in_another(
    make_app: Callable[..., App], admin: psycopg.Connection[Any]
) -> None:
    """Two stores' schemas in one database, one sequence key: a transaction of the first
    holding the key's lock (an enqueue or a finish handing its turn over) does not make
    the second's turn miss (it would wait for the rescuer's pass)."""
    here, there = make_app(), make_app()

    @here.task(name="seq.here", sequence_key="k")
    def first(n: int) -> None: ...

    @there.task(name="seq.there", sequence_key="k")
    def second(n: int) -> None: ...

    with here.connection() as conn, conn.transaction():
        conn.execute(f"SELECT {here.schema}.sequence_advance('k')")  # holds "k" of here
        job = second.delay(1).id  # its turn is handed over at its enqueue's commit
    assert _statuses(admin, there.schema)[job] == "pending"
    mine = first.delay(1).id
    assert _statuses(admin, here.schema) == {mine: "pending"}, (here.schema, there.schema)


def _round_trip(
    app: App, jobs: list[ClaimedJob], claim: ClaimRequest, outcome: Outcome | None = None
) -> tuple[list[ClaimedJob], list[ClaimedJob]]:
    """A worker's round trip: the finishes of ``jobs`` and a claim, in one transaction;
    the jobs the finish handed over, and those the claim took."""
    with app.connection() as conn:
        trip = app.queries.finish_and_claim_jobs(
            conn, [Finish.of(job, outcome or Outcome.done("null")) for job in jobs], claim
        )
    return list(trip.handed), list(trip.claimed)


def test_a_round_trip_that_ends_a_head_takes_the_next_job_running(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task(sequence_key=lambda key, n: key)
    def step(key: str, n: int) -> None: ...

    @app.task
    def other() -> None: ...

    ids = {key: [step.delay(key, n).id for n in range(3)] for key in ("a", "b")}
    plain = other.delay().id
    worker = _worker(app)
    heads = [job for job in _claim(app, worker) if job.task_name == step.name]
    assert sorted(job.id for job in heads) == sorted([ids["a"][0], ids["b"][0]])
    claim = ClaimRequest(worker, 10, task_names=(step.name, other.name))
    handed, claimed = _round_trip(app, heads, claim)
    # The next job of each key, running under this worker's fresh lease (one write:
    # it was never pending), and returned beside the claim's.
    assert sorted(job.id for job in handed) == sorted([ids["a"][1], ids["b"][1]])
    assert {job.attempt for job in handed} == {1}
    assert {job.worker_id for job in handed} == {worker}
    rows = admin.execute(
        f"SELECT id, status, locked_by, attempts FROM {app.schema}.jobs WHERE id = ANY(%s)",
        ([job.id for job in handed],),
    ).fetchall()
    assert sorted(rows) == sorted((job.id, "running", worker, 1) for job in handed)
    assert plain not in {job.id for job in handed}
    assert {job.id for job in claimed} <= {plain}
    # Their finishes hold: the lease is the handed one.
    handed, _ = _round_trip(app, handed, claim)
    assert sorted(job.id for job in handed) == sorted([ids["a"][2], ids["b"][2]])
    _end(app, handed)
    statuses = _statuses(admin, app.schema)
    assert {statuses[i] for key in ids for i in ids[key]} == {"done"}


@pytest.mark.parametrize("form", ["after", "aged"])
def test_every_plain_claim_returns_the_handed_jobs_apart_from_its_own(
    app: App, admin: psycopg.Connection[Any], form: str
) -> None:
    """The plain claims' _handing forms (migration sequence_handed_with_claim): the jobs
    the finish handed over come back as handed, never as claimed (they have no place in
    the claim order), and the claim's own jobs as claimed."""

    @app.task(sequence_key="k")
    def step(n: int) -> None: ...

    @app.task
    def other() -> None: ...

    ids = [step.delay(n).id for n in range(2)]
    worker = _worker(app)
    (head,) = [job for job in _claim(app, worker) if job.task_name == step.name]
    plain = other.delay().id
    if form == "after":
        claim = ClaimRequest(worker, 10, after=ClaimPosition(-(2**31), head.run_at, 0))
    else:
        claim = ClaimRequest(worker, 10, aging=60.0)
    assert claim_statement(claim)[0] == f"claim_jobs_{form}"
    handed, claimed = _round_trip(app, [head], claim)
    assert [job.id for job in handed] == [ids[1]]
    assert [job.id for job in claimed] == [plain]
    assert {job.worker_id for job in handed + claimed} == {worker}
    assert _statuses(admin, app.schema)[ids[1]] == "running"


def test_a_next_job_the_taker_may_not_run_goes_pending(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task(sequence_key="k")
    def first() -> None: ...

    @app.task(sequence_key="k")
    def second() -> None: ...

    head, after = first.delay().id, second.delay().id
    worker = _worker(app)
    claimed = _claim(app, worker)
    assert [job.id for job in claimed] == [head]
    # This worker does not know the next job's task: it is left to a claim, pending.
    handed, taken = _round_trip(app, claimed, ClaimRequest(worker, 10, task_names=(first.name,)))
    assert handed == [] and taken == []
    assert _statuses(admin, app.schema)[after] == "pending"


def test_a_retried_head_hands_nothing_over(app: App, admin: psycopg.Connection[Any]) -> None:
    @app.task(sequence_key="k", max_attempts=3)
    def step(n: int) -> None: ...

    ids = [step.delay(n).id for n in range(2)]
    worker = _worker(app)
    claimed = _claim(app, worker)
    handed, _ = _round_trip(app, claimed, ClaimRequest(worker, 10), Outcome.retry(60.0, "boom"))
    assert handed == []
    assert _statuses(admin, app.schema) == {ids[0]: "pending", ids[1]: "waiting"}


def test_a_round_trip_with_a_limited_claim_takes_the_next_job_too(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task(sequence_key="k")
    def step(n: int) -> None: ...

    @app.task(concurrency=1)
    def capped() -> None: ...

    ids = [step.delay(n).id for n in range(2)]
    capped_id = capped.delay().id
    worker = _worker(app)
    head = [job for job in _claim(app, worker) if job.id == ids[0]]
    assert head
    handed, claimed = _round_trip(app, head, ClaimRequest(worker, 10, limited=True))
    assert [job.id for job in handed] == [ids[1]]
    assert capped_id in {job.id for job in claimed}
    assert _statuses(admin, app.schema)[ids[1]] == "running"
