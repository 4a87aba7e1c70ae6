"""Every file in examples/ runs: the demo end to end against the test server."""

from __future__ import annotations

import pytest

from tests.support.examples import run_example, run_python

pytestmark = pytest.mark.acceptance


def test_demo_runs_every_kind_of_job_to_the_end(example_env: dict[str, str]) -> None:
    out = run_example("examples.demo", example_env, timeout=150)
    assert "1035 jobs finished" in out
    assert "flaky (succeeds on attempt 3)        5     5      0       5" in out
    assert "always failing                       2     0      2       2" in out
    assert "'account 0 synced on attempt 3'" in out
    assert "ValueError: payment 4000 declined by the card issuer" in out
    assert "worker stopped with exit code 0" in out


def test_example_app_imports_and_enqueues_each_task(example_env: dict[str, str]) -> None:
    script = """
from datetime import timedelta
from examples.app import (app, charge_card, fetch_exchange_rate, resize_image,
                          send_welcome_email, sync_with_partner)
app.migrate()
jobs = [
    send_welcome_email.delay("a@example.com", name="A"),
    resize_image.apply_at(timedelta(seconds=60), image_id=1),
    sync_with_partner.delay(account_id=7),
    charge_card.delay(payment_id=4000),
    fetch_exchange_rate.delay("USD"),
]
print(sorted({job.status().value for job in jobs}), len({job.id for job in jobs}))
app.close()
"""
    out = run_python("-c", script, env=example_env, timeout=60)
    assert out.strip() == "['pending'] 5"


def test_cancellation_example_stops_a_running_export(example_env: dict[str, str]) -> None:
    out = run_example("examples.cancellation", example_env)
    assert "is running: cancellation requested" in out
    assert "export: cancellation seen after" in out
    assert "was cancelled" in out
    assert "final status: cancelled" in out


def test_flow_control_example_pauses_and_resumes_a_queue(example_env: dict[str, str]) -> None:
    out = run_example("examples.flow_control", example_env)
    assert "pause emails: True" in out
    assert "paused queues: ['emails']" in out
    assert "default queue carries on: image 7 resized" in out
    assert "emails jobs while paused: ['pending', 'pending']" in out
    assert "the running job finishes: batch 0 sent" in out
    assert "resume emails: True" in out
    assert "after resume: ['batch 1 sent', 'batch 2 sent']" in out


def test_metadata_example_reports_progress_and_the_failed_attempt(
    example_env: dict[str, str],
) -> None:
    out = run_example("examples.metadata", example_env)
    assert "meta at enqueue: {'customer': 'acme'}" in out
    assert "task: importing for 'acme' (attempt 2)" in out
    assert "progress: " in out
    assert "result: 100 rows" in out
    assert "user meta: {'customer': 'acme', 'source': 'legacy-db'}" in out, out
    assert "attempt 1 failed on worker" in out
    assert "builtins.ConnectionError" in out


def test_durable_example_charges_once_and_waits_for_its_event(
    example_env: dict[str, str],
) -> None:
    out = run_example("examples.durable", example_env)
    assert "is pending, waiting: event" in out
    assert "task: reminder for order 42 sent" in out
    assert "result: ch_42 shipped by DHL" in out
    assert "card charged 1 time(s), attempts used: 2" in out
    assert "step 1: charge done" in out and "step 5: remind done" in out


def test_limits_example_keeps_each_limit(example_env: dict[str, str]) -> None:
    out = run_example("examples.limits", example_env)
    assert "most jobs of one user at once: 1" in out
    assert "most reports at once: 2" in out or "most reports at once: 1" in out
    assert "12 API calls at 10/s took" in out


def test_uniqueness_example_shows_each_scope(example_env: dict[str, str]) -> None:
    out = run_example("examples.uniqueness", example_env)
    assert "while active: same job True, existed True" in out
    assert "first: account 42 synced" in out
    assert "after it finished: new job True, existed False" in out
    assert "digests in one window: 2 jobs for 3 enqueues" in out
    assert "next window: new job True" in out
    assert "key for life: same job after it ran True" in out
    assert "refused: unique_for= must be a positive timedelta" in out


def test_workflows_example_chains_gathers_and_handles_a_failure(
    example_env: dict[str, str],
) -> None:
    out = run_example("examples.workflows", example_env)
    assert "chain: invoice of 24.0 sent to ada@example.com" in out
    assert "chord: Trip: thumb-0.png, thumb-1.png, thumb-2.png" in out
    assert "not sent: step 1 (billing.charge) failed: card declined for order 7" in out
    assert "workflow status: failed" in out
    assert "on_error: #billing: step 1 (billing.charge) failed" in out


def test_otel_example_traces_the_enqueue_and_both_attempts(example_env: dict[str, str]) -> None:
    out = run_example("examples.otel", example_env)
    lines = out.splitlines()
    assert lines[0] == "result: order 42 charged"
    assert [line.split() for line in lines[1:]] == [
        ["checkout", "INTERNAL", "same", "trace"],
        ["send", "shop.charge", "PRODUCER", "same", "trace"],
        [
            "process",
            "shop.charge",
            "CONSUMER",
            "same",
            "trace",
            "attempt=1",
            "outcome=retried",
            "links=0",
        ],
        [
            "process",
            "shop.charge",
            "CONSUMER",
            "new",
            "trace",
            "attempt=2",
            "outcome=done",
            "links=1",
        ],
    ]


def test_tenants_example_shares_turns_keeps_order_and_holds_on_failure(
    example_env: dict[str, str],
) -> None:
    out = run_example("examples.tenants", example_env)
    before = int(out.split("tiny's 5 rows all started after ")[1].split()[0])
    assert before < 100, out
    assert "ann's entries applied in order: [0, 1, 2, 3]" in out
    assert "held by a failed entry: [('bob', 1)] (bob's entry 3 waits)" in out
    assert "bob's entries applied: [0, 1, 3]" in out


def test_batches_example_debounces_a_burst_and_runs_pushes_in_batches(
    example_env: dict[str, str],
) -> None:
    out = run_example("examples.batches", example_env)
    assert "50 enqueues, distinct jobs: 1" in out
    assert "reindex: products reindexed once, for request 49" in out
    assert "pushes done: 250; user 13 notified on attempt 2; user 14 notified on attempt 1" in out
    assert "largest batch: 100" in out
    assert "user 13 attempts: 2, first error: ConnectionError: push gateway timed out" in out
    assert "handler calls: 3," in out or "handler calls: 4," in out  # not one call per job
