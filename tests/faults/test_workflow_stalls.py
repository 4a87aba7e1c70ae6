"""Workflows never stall, with real worker processes (see docs/howto/workflows.md):

- a lock timeout on a chord's callback (a DBA's lock_timeout, another session holding
  the row) fails the fenced finish that would move the workflow on; the worker writes
  the same outcomes again until it succeeds, and the callback starts once;
- under a REPEATABLE READ default, serialization failures are retried the same way;
- a start that is lost for good (a tolerated error, injected here) is found by the
  healing pass, which starts the callback once, with every result in order, and
  ``pgtasks doctor`` reports it.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from pgtasks import chain, chord
from tests.support.cli import cli_runner
from tests.support.faults import APP_PATH, FaultEnv
from tests.support.probe import assert_invariants
from tests.support.waiting import wait_until


def workflow_job_ids(env: FaultEnv, workflow_id: int) -> list[int]:
    return [job["id"] for job in env.app.get_workflow(workflow_id)["jobs"]]


def statuses(env: FaultEnv, job_ids: list[int]) -> list[str]:
    rows = env.probe.rows(
        "SELECT status FROM {schema}.all_jobs WHERE id = ANY(%s) ORDER BY id", (job_ids,)
    )
    return [row["status"] for row in rows]


def finished_runs(env: FaultEnv, job_ids: list[int]) -> int:
    rows = env.probe.rows(
        "SELECT count(*) AS n FROM {schema}.executions"
        " WHERE job_id = ANY(%s) AND finished IS NOT NULL",
        (job_ids,),
    )
    return int(rows[0]["n"])


def incidents(env: FaultEnv) -> list[dict[str, Any]]:
    return env.probe.rows(
        "SELECT kind, job_id, detail, occurrences FROM {schema}.workflow_incidents ORDER BY id"
    )


def test_a_callback_locked_past_lock_timeout_starts_once_when_the_finish_is_retried(
    settings_env: Any,
) -> None:
    env: FaultEnv = settings_env(lock_timeout="500ms")
    assert env.probe.rows("SHOW lock_timeout") == [{"lock_timeout": "500ms"}]
    sleep, collect = env.tasks.sleep, env.tasks.collect
    workflow = chord([sleep.si(0.01 * n) for n in range(1, 5)], collect.s()).delay()
    ids = workflow_job_ids(env, workflow.id)
    members, callback = ids[:-1], ids[-1]
    with psycopg.connect(env.dsn) as holder:
        # Another session's transaction holds the callback's row (an operator's UPDATE, a
        # long report): each finish that would decrement it waits 500 ms and fails.
        holder.execute(
            sql.SQL("SELECT 1 FROM {}.jobs WHERE id = %s FOR UPDATE").format(
                sql.Identifier(env.schema)
            ),
            (callback,),
        )
        worker = env.worker("--concurrency=4")
        wait_until(
            lambda: finished_runs(env, members) == len(members),
            timeout=20,
            message="every member's task code to end",
        )
        log = worker.wait_for_log("LockNotAvailable", timeout=20)
        assert "retrying" in log
        # Nothing was written: every member is still running under its lease (never
        # failed, never run again), the callback still waits.
        assert statuses(env, ids) == ["running"] * len(members) + ["waiting"]
        holder.rollback()
    assert workflow.get(timeout=30) == [0.01, 0.02, 0.03, 0.04]
    rows = env.probe.rows(
        "SELECT id, status, attempts FROM {schema}.all_jobs WHERE id = ANY(%s) ORDER BY id", (ids,)
    )
    assert [(row["status"], row["attempts"]) for row in rows] == [("done", 1)] * len(ids)
    assert len(env.probe.executions(callback)) == 1
    assert incidents(env) == []  # a lock timeout is retried, never tolerated
    assert_invariants(env.probe, ids)


def test_workflows_complete_once_under_a_repeatable_read_default(settings_env: Any) -> None:
    env: FaultEnv = settings_env(default_transaction_isolation="repeatable read")
    assert env.probe.rows("SHOW default_transaction_isolation") == [
        {"default_transaction_isolation": "repeatable read"}
    ]
    sleep, collect = env.tasks.sleep, env.tasks.collect
    values = [0.001 * n for n in range(1, 6)]
    chords = [chord([sleep.si(value) for value in values], collect.s()).delay() for _ in range(12)]
    nested = [
        chord(
            [
                sleep.si(0.001),
                chord([sleep.si(0.002), sleep.si(0.003)], collect.s()),
                sleep.si(0.004),
            ],
            collect.s(),
        ).delay()
        for _ in range(8)
    ]
    chains = [
        chain(sleep.si(0.001), sleep.s(), sleep.s(), collect.si([7])).delay() for _ in range(8)
    ]
    workers = env.workers(2, "--concurrency=4")
    for workflow in chords:
        assert workflow.get(timeout=60) == values
    for workflow in nested:
        assert workflow.get(timeout=60) == [0.001, [0.002, 0.003], 0.004]
    for workflow in chains:
        assert workflow.get(timeout=60) == [7]
    all_ids = [
        job_id
        for workflow in chords + nested + chains
        for job_id in workflow_job_ids(env, workflow.id)
    ]
    # Every job ran to completion exactly once: no callback started twice, no step lost.
    assert {job_id: finished_runs(env, [job_id]) for job_id in all_ids} == dict.fromkeys(all_ids, 1)
    assert incidents(env) == []
    assert_invariants(env.probe, all_ids)
    del workers


def test_a_lost_start_is_healed_once_with_every_result_in_order(env: FaultEnv) -> None:
    schema = sql.Identifier(env.schema)
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        # Injected fault: while the flag row exists, any step's start (waiting -> pending)
        # fails with an error a hand-edited row could cause: the trigger tolerates it (the
        # finishing write stands) and the callback is left waiting.
        conn.execute(
            sql.SQL(
                "CREATE TABLE {schema}.injected_faults (name text PRIMARY KEY);"
                " INSERT INTO {schema}.injected_faults VALUES ('lose the start');"
                " CREATE FUNCTION {schema}.inject_fault() RETURNS trigger LANGUAGE plpgsql AS $$"
                " BEGIN"
                "   IF EXISTS (SELECT 1 FROM {schema}.injected_faults) THEN"
                "     RAISE EXCEPTION 'injected fault: this start is lost'"
                "         USING ERRCODE = 'data_exception';"
                "   END IF;"
                "   RETURN NEW;"
                " END $$;"
                " CREATE TRIGGER inject_fault BEFORE UPDATE OF status ON {schema}.jobs"
                " FOR EACH ROW WHEN (OLD.status = 'waiting' AND NEW.status = 'pending')"
                " EXECUTE FUNCTION {schema}.inject_fault();"
            ).format(schema=schema)
        )
    sleep, collect = env.tasks.sleep, env.tasks.collect
    workflow = chord([sleep.si(0.01 * n) for n in range(1, 7)], collect.s()).delay()
    ids = workflow_job_ids(env, workflow.id)
    members, callback = ids[:-1], ids[-1]
    workers = env.workers(2, "--concurrency=3", PGTASKS_TEST_HEAL_INTERVAL="0.5")
    tolerated = wait_until(
        lambda: [row for row in incidents(env) if row["kind"] == "tolerated"],
        timeout=30,
        message="the lost start to be recorded",
    )
    assert {row["job_id"] for row in tolerated} <= set(members)
    assert "injected fault: this start is lost" in tolerated[0]["detail"]
    assert statuses(env, ids) == ["done"] * len(members) + ["waiting"]
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DELETE FROM {}.injected_faults").format(schema))
    assert workflow.get(timeout=30) == [0.01 * n for n in range(1, 7)]
    assert len(env.probe.executions(callback)) == 1
    assert env.probe.job(callback)["attempts"] == 1
    healed = [row for row in incidents(env) if row["kind"] == "healed"]
    assert [(row["job_id"], row["occurrences"]) for row in healed] == [(callback, 1)]
    assert "the healing pass started it" in healed[0]["detail"]
    assert any("healed workflow step: job" in worker.log() for worker in workers)
    assert_invariants(env.probe, ids)

    doctor = cli_runner(env.app, APP_PATH)("doctor")
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    line = next(line for line in doctor.stdout.splitlines() if line.split()[1:2] == ["workflows:"])
    assert "no stuck step now" in line and "healed 1 stuck step(s)" in line, doctor.stdout
