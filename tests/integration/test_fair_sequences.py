"""Fair queuing by key and sequences, strict order per key (migration 0023): the rows
enqueue writes, the claim's order across keys, a sequence's turns and failure modes, and
the plans (a sequence's backlog is never read by a claim)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from pgtasks import App, JobStatus, LimitKeyError, TaskRegistrationError
from pgtasks._app.keyed_admin import release_sequence
from pgtasks._leases import ClaimedJob, ClaimRequest, Finish
from pgtasks._retry import Outcome
from tests.support.inprocess import finished, running_worker


def _worker(app: App) -> int:
    with app.connection() as conn:
        return app.queries.register_worker(conn, hostname="h", pid=1, queues=None, concurrency=8)


def _claim(app: App, worker_id: int, limit: int, *, limited: bool = True) -> list[ClaimedJob]:
    with app.connection() as conn:
        claim = ClaimRequest(worker_id, limit, limited=limited)
        return list(app.queries.finish_and_claim_jobs(conn, (), claim).claimed)


def _end(app: App, jobs: list[ClaimedJob], outcome: Outcome | None = None) -> None:
    with app.connection() as conn:
        app.queries.finish_jobs(
            conn, [Finish.of(job, outcome or Outcome.done("null")) for job in jobs]
        )


def _statuses(admin: psycopg.Connection[Any], app: App) -> dict[int, str]:
    rows = admin.execute(f"SELECT id, status FROM {app.schema}.all_jobs ORDER BY id")
    return dict(rows.fetchall())


def test_fair_claims_take_turns_across_keys(app: App) -> None:
    @app.task(fair_key=lambda tenant, n: tenant)
    def work(tenant: str, n: int) -> None: ...

    work.delay_many([{"tenant": "a", "n": n} for n in range(50)])
    worker = _worker(app)
    first = _claim(app, worker, 5)
    assert [job.kwargs["tenant"] for job in first] == ["a"] * 5
    work.delay_many([{"tenant": "b", "n": n} for n in range(3)])
    work.apply_async(kwargs={"tenant": "c", "n": 0})
    # b and c start at the rank a is served at: a claim of 4 takes a's next two, b's
    # first and c's (ties at a rank go by run_at: a first).
    assert sorted(job.kwargs["tenant"] for job in _claim(app, worker, 4)) == ["a", "a", "b", "c"]
    assert sorted(job.kwargs["tenant"] for job in _claim(app, worker, 4)) == ["a", "a", "b", "b"]


def test_fair_keys_compose_with_a_concurrency_key_cap(app: App) -> None:
    @app.task(
        fair_key=lambda tenant, n: tenant, concurrency_key=lambda tenant, n: tenant, concurrency=2
    )
    def work(tenant: str, n: int) -> None: ...

    with app.connection() as conn:
        app.queries.upsert_limits(conn, app.limit_definitions())
    work.delay_many([{"tenant": t, "n": n} for t in ("a", "b") for n in range(10)])
    worker = _worker(app)
    taken = _claim(app, worker, 10)
    assert sorted(job.kwargs["tenant"] for job in taken) == ["a", "a", "b", "b"]


def test_the_enqueue_option_and_bad_keys(app: App, admin: psycopg.Connection[Any]) -> None:
    @app.task
    def plain(n: int) -> None: ...

    handle = plain.apply_async((1,), fair_key="t1", sequence_key=7)
    meta = admin.execute(
        f"SELECT meta, status, limit_groups FROM {app.schema}.jobs WHERE id = %s", (handle.id,)
    ).fetchone()
    assert meta is not None
    assert meta[0]["pgtasks.fair_key"] == "t1" and meta[0]["pgtasks.sequence"] == "7"
    assert meta[0]["pgtasks.fair_rank"] == 0
    assert meta[2] == []
    with pytest.raises(LimitKeyError, match="fair_key must be"):
        plain.apply_async((1,), fair_key=lambda n: None)
    with pytest.raises(LimitKeyError, match="sequence_key raised ZeroDivisionError"):
        plain.apply_async((1,), sequence_key=lambda n: n / 0)
    with pytest.raises(LimitKeyError, match="must not contain NUL"):
        plain.apply_async((1,), fair_key="a\x00b")
    with pytest.raises(ValueError, match="link= or link_error="):
        plain.apply_async((1,), sequence_key="k", link=plain.s(2))
    # Nothing of the refused enqueues was written.
    count = admin.execute(f"SELECT count(*) FROM {app.schema}.jobs").fetchone()
    assert count == (1,)
    with pytest.raises(ValueError, match="sequence_on_failure= must be one of"):
        plain.apply_async((1,), sequence_key="k", sequence_on_failure="retry")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a sequence_key"):
        plain.apply_async((1,), sequence_on_failure="continue")
    with pytest.raises(TaskRegistrationError, match="fair_key= must be"):
        app.task(fair_key=1.5)(lambda: None)  # type: ignore[arg-type]
    with pytest.raises(TaskRegistrationError, match="sequence_on_failure"):
        app.task(sequence_key="k", sequence_on_failure="skip")(lambda: None)  # type: ignore[arg-type]


def test_a_sequence_runs_one_job_at_a_time_in_enqueue_order(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task(sequence_key=lambda account, n: account)
    def apply(account: str, n: int) -> None: ...

    handles = [apply.apply_async(("x", n), priority=n) for n in range(4)]
    other = apply.delay("y", 0)
    worker = _worker(app)
    ids = [h.id for h in handles]
    # Priority does not reorder a sequence: only its head is pending.
    statuses = _statuses(admin, app)
    assert [statuses[i] for i in ids] == ["pending", "waiting", "waiting", "waiting"]
    seen = []
    for _ in range(4):
        claimed = _claim(app, worker, 10, limited=False)
        assert [job.id for job in claimed if job.kwargs == {}].count(0) == 0
        mine = [job for job in claimed if job.args[0] == "x"]
        assert len(mine) == 1
        seen.append(mine[0].id)
        _end(app, claimed)
    assert seen == ids
    assert _statuses(admin, app)[other.id] == "done"


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("hold", ["failed", "waiting", "waiting"]),
        ("continue", ["failed", "pending", "waiting"]),
        ("cancel", ["failed", "cancelled", "cancelled"]),
    ],
)
def test_a_failed_job_of_a_sequence(
    app: App, admin: psycopg.Connection[Any], mode: str, expected: list[str]
) -> None:
    @app.task(sequence_key="s", sequence_on_failure=mode, max_attempts=1)  # type: ignore[arg-type]
    def step(n: int) -> None: ...

    ids = [step.delay(n).id for n in range(3)]
    worker = _worker(app)
    claimed = _claim(app, worker, 10, limited=False)
    assert [job.id for job in claimed] == ids[:1]
    _end(app, claimed, Outcome.failed("boom"))
    statuses = _statuses(admin, app)
    assert [statuses[i] for i in ids] == expected
    holds = admin.execute(f"SELECT sequence_key, job_id FROM {app.schema}.sequence_holds")
    assert holds.fetchall() == ([("s", ids[0])] if mode == "hold" else [])
    if mode == "hold":
        # Released by an operator: the next job starts.
        assert release_sequence(app, "s") == ids[1]
        assert _statuses(admin, app)[ids[1]] == "pending"


def test_a_held_sequence_goes_on_when_its_failed_job_is_retried_and_done(
    app: App, admin: psycopg.Connection[Any]
) -> None:
    @app.task(sequence_key="s", max_attempts=1)
    def step(n: int) -> None: ...

    ids = [step.delay(n).id for n in range(2)]
    worker = _worker(app)
    _end(app, _claim(app, worker, 10, limited=False), Outcome.failed("boom"))
    step.delay(2)  # a later enqueue does not jump the hold
    assert _statuses(admin, app)[ids[1]] == "waiting"
    app.admin.retry_job(ids[0])
    claimed = _claim(app, worker, 10, limited=False)
    assert [job.id for job in claimed] == ids[:1]
    _end(app, claimed)
    assert _statuses(admin, app)[ids[1]] == "pending"


def test_a_claim_never_reads_a_sequence_backlog(app: App, admin: psycopg.Connection[Any]) -> None:
    @app.task(sequence_key="big")
    def step(n: int) -> None: ...

    step.delay_many([{"n": n} for n in range(3000)])
    admin.execute(f"ANALYZE {app.schema}.jobs")
    plan = admin.execute(
        f"EXPLAIN (ANALYZE, FORMAT JSON) SELECT id FROM {app.schema}.jobs"
        " WHERE status = 'pending' AND run_at <= now() AND limit_groups IS NULL"
        " ORDER BY priority DESC, run_at, id LIMIT 10 FOR UPDATE SKIP LOCKED"
    ).fetchone()
    assert plan is not None
    text = str(plan[0])
    assert "jobs_claim_idx" in text and "Seq Scan" not in text

    def rows(node: dict[str, Any]) -> int:
        own = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
        return max([own, *(rows(child) for child in node.get("Plans", []))])

    # One pending job (the head) is read; the 2,999 waiting ones are in no claim index.
    assert rows(plan[0][0]["Plan"]) <= 1
    with running_worker(app) as _:
        pass
    waiting = admin.execute(
        f"SELECT count(*) FROM {app.schema}.jobs WHERE status = 'waiting'"
    ).fetchone()
    assert waiting is not None and waiting[0] >= 2990


def test_a_real_worker_drains_fair_and_sequence_jobs(app: App) -> None:
    order: list[int] = []

    @app.task(fair_key=lambda n: n % 3, sequence_key=lambda n: "one")
    def work(n: int) -> None:
        order.append(n)

    handles = work.delay_many([{"n": n} for n in range(20)])
    with running_worker(app, concurrency=4):
        for handle in handles:
            assert finished(handle).status == JobStatus.DONE
    assert order == list(range(20))


def test_prometheus_serves_the_fair_keys_and_sequences(app: App) -> None:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from pgtasks import WorkerMetrics
    from tests.support.waiting import wait_until

    @app.task(sequence_key="s", max_attempts=1)
    def step(n: int) -> None:
        raise RuntimeError("held")

    @app.task(fair_key=lambda tenant: tenant, queue="elsewhere")
    def fair(tenant: str) -> None: ...

    handles = [step.delay(n) for n in range(3)]
    fair.delay("t1")
    fair.delay("t2")
    metrics = WorkerMetrics(queue_depth_interval=0.05, process_metrics=False)

    def flow() -> dict[str, float]:
        text = generate_latest(metrics.registry).decode()
        return {
            sample.labels["what"]: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "pgtasks_flow"
        }

    with running_worker(app, observers=[metrics], queues=["default"]):
        assert finished(handles[0]).status == JobStatus.FAILED
        expected = {"fair_keys": 2, "sequences": 1, "sequence_jobs_waiting": 2, "sequences_held": 1}
        wait_until(lambda: flow() == expected, message=f"pgtasks_flow to be {expected}")


def test_the_workflow_healer_leaves_a_sequences_waiting_jobs_alone(app: App) -> None:
    @app.task(sequence_key="s")
    def step(n: int) -> None: ...

    step.delay_many([{"n": n} for n in range(3)])
    with app.connection() as conn:
        # Waiting for their turn, with no predecessors: not a stuck workflow step.
        assert app.queries.find_stuck_steps(conn, limit=10) == []
        assert app.queries.get_workflow_health(conn, since=60)["stuck"] == 0
