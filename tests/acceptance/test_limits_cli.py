"""``pgtasks limits`` and the LIMITS column of ``pgtasks queues list`` as real
subprocesses, on the limits scenarios' app."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from pgtasks import App
from pgtasks._leases import ClaimRequest
from tests.apps.limits_app import CAPPED_QUEUE, register_limit_tasks
from tests.support.cli import cli_runner

pytestmark = pytest.mark.acceptance


def test_limits_and_queues_list_show_the_stored_limits_and_running_jobs(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    tasks = register_limit_tasks(app)
    cli = cli_runner(app, "tests.apps.limits_app:app")
    empty = cli("limits")
    assert empty.returncode == 0, empty.stderr
    assert "no limits are stored" in empty.stdout

    with app.connection() as conn:
        assert app.queries.upsert_limits(conn, app.limit_definitions()) == 6
        worker = app.queries.register_worker(conn, hostname="h", pid=1, queues=None, concurrency=8)
    tasks.per_key.delay_many([{"user": user, "seconds": 0} for user in ("ann", "ann", "bob")])
    tasks.per_task.delay(0)
    with app.connection() as conn:
        trip = app.queries.finish_and_claim_jobs(conn, (), ClaimRequest(worker, 10, limited=True))
    assert len(trip.claimed) == 3  # one per key, and the per-task job

    listed = cli("limits")
    assert listed.returncode == 0, listed.stderr
    lines = [line.split() for line in listed.stdout.splitlines()]
    assert lines[0] == [
        *("LIMIT", "CONCURRENCY", "RATE", "TOKENS", "RUNNING", "PENDING", "HELD", "KEYS")
    ]
    # ann's second job is due and held back by its key's limit of one.
    assert lines[1] == [f"key:{tasks.per_key.name}", "1", "-", "-", "2", "1", "1", "2"]
    assert lines[2] == [f"queue:{CAPPED_QUEUE}", "2", "-", "-", "0", "0", "0", "-"]
    assert lines[4][:3] == [f"task:{tasks.per_task.name}", "3", "-"]
    assert lines[5][:3] == [f"task:{tasks.rated.name}", "-", "240/m"]
    assert ["LIMIT", "KEY", "RUNNING", "PENDING", "HELD"] in lines
    assert [f"key:{tasks.per_key.name}", "ann", "1", "1", "1"] in lines

    document = json.loads(cli("limits", "--json").stdout)
    by_name = {entry["name"]: entry for entry in document["limits"]}
    per_task = by_name[f"task:{tasks.per_task.name}"]
    assert (per_task["kind"], per_task["target"], per_task["running"]) == (
        "task",
        tasks.per_task.name,
        1,
    )
    rated = by_name[f"task:{tasks.rated.name}"]
    # A full bucket: 240/m holds two tokens (one plus a quarter second's, at most two).
    assert (rated["tokens"], rated["burst"], rated["rate_per_second"]) == (2.0, 2.0, 4.0)
    assert rated["next_token_in"] == 0
    keyed = by_name[f"key:{tasks.per_key.name}"]
    assert [(key["key"], key["running"], key["held"]) for key in keyed["top_keys"]] == [
        ("ann", 1, 1),
        ("bob", 1, 0),
    ]
    assert {(entry["key"], entry["running"]) for entry in document["keys"]} == {
        ("ann", 1),
        ("bob", 1),
    }

    queues = json.loads(cli("queues", "list", "--json").stdout)["queues"]
    assert {entry["queue"]: entry["limits"] for entry in queues}[CAPPED_QUEUE] == "concurrency=2"
