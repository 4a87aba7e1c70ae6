"""``pgtasks limits`` (fair keys and sequences), ``pgtasks sequences release``, ``pgtasks
stats --json`` and ``pgtasks doctor`` on a sequence held by a failed job, as real
subprocesses on the keyed scenarios' app."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from pgtasks import App
from pgtasks._leases import ClaimRequest, Finish
from pgtasks._retry import Outcome
from tests.apps.keyed_app import register_keyed_tasks
from tests.support.cli import cli_runner

pytestmark = pytest.mark.acceptance


@pytest.mark.slow
def test_limits_show_fair_keys_and_sequences_and_a_held_one_is_released(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    tasks = register_keyed_tasks(app)
    cli = cli_runner(app, "tests.apps.keyed_app:app")
    tasks.tenant_job.delay_many([{"tenant": "big", "n": n} for n in range(5)])
    tasks.tenant_job.delay("small", 0)
    held = [tasks.ordered.delay("acct", n, 0).id for n in range(3)]
    with app.connection() as conn:
        worker = app.queries.register_worker(conn, hostname="h", pid=1, queues=None, concurrency=8)
        claimed = app.queries.finish_and_claim_jobs(
            conn, (), ClaimRequest(worker, 10, task_names=(tasks.ordered.name,))
        ).claimed
        assert [job.id for job in claimed] == held[:1]
        app.queries.finish_jobs(
            conn,
            [Finish.of(claimed[0], Outcome.failed("boom"))],  # max_attempts reached below
        )
    # The head is retried (attempts left): fail it for good.
    with app.connection() as conn:
        conn.execute(
            f"UPDATE {app.schema}.jobs SET max_attempts = 1, run_at = now() WHERE id = %s",
            (held[0],),
        )
        claimed = app.queries.finish_and_claim_jobs(
            conn, (), ClaimRequest(worker, 10, task_names=(tasks.ordered.name,))
        ).claimed
        app.queries.finish_jobs(conn, [Finish.of(job, Outcome.failed("boom")) for job in claimed])

    listed = cli("limits")
    assert listed.returncode == 0, listed.stderr
    lines = [line.split() for line in listed.stdout.splitlines()]
    assert ["FAIR", "KEY", "LIST", "PENDING", "RUNNING", "OLDEST", "DUE", "WAITED"] in lines
    assert any(line[:4] == ["big", "busiest", "5", "0"] for line in lines)
    assert any(line[:2] == ["small", "starved"] for line in lines)
    assert ["acct", "2", "-", "-", str(held[0])] in lines
    document = json.loads(cli("limits", "--json").stdout)
    assert document["sequences"][0]["held_by"] == held[0]
    assert document["sequences"][0]["length"] == 2
    assert document["fair_keys"]["busiest"][0] == {
        "key": "big",
        "pending": 5,
        "running": 0,
        "waited": document["fair_keys"]["busiest"][0]["waited"],
    }

    stats = json.loads(cli("stats", "--json").stdout)
    assert stats["flow"] == {
        "fair_keys": 2,
        "sequences": 1,
        "sequence_jobs_waiting": 2,
        "sequences_held": 1,
    }
    doctor = cli("doctor")
    assert f"sequence 'acct' is held by failed job {held[0]}" in doctor.stdout + doctor.stderr

    released = cli("sequences", "release", "acct")
    assert released.returncode == 0, released.stderr
    assert released.stdout.strip() == f"sequence acct: released; job {held[1]} started"
    again = cli("sequences", "release", "acct", "--json")
    assert json.loads(again.stdout) == {"sequence": "acct", "started": None}
    bad = cli("sequences", "release", "")
    assert bad.returncode == 2 and "sequence key" in bad.stderr
