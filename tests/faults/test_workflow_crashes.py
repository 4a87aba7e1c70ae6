"""Workflows survive SIGKILLed workers: a step (or chord member) whose worker dies runs
again on another worker, and the workflow goes on; no step is lost, none is completed
twice, a chord's callback runs once with every member's result."""

from __future__ import annotations

import signal
from typing import Any

from pgtasks import chain, chord, group
from tests.support.faults import FaultEnv
from tests.support.probe import assert_invariants, wait_started, wait_status
from tests.support.processes import RESCUE_BOUND, by_pid

#: How long the first attempt of the job whose worker is killed sleeps: it is killed
#: long before, however loaded the machine (a short sleep could end first).
DOOMED = 60.0


def workflow_job_ids(env: FaultEnv, workflow_id: int) -> list[int]:
    return [job["id"] for job in env.app.get_workflow(workflow_id)["jobs"]]


def completions(env: FaultEnv, job_ids: list[int]) -> dict[int, int]:
    """Finished executions per job."""
    rows = env.probe.rows(
        "SELECT job_id, count(*) FILTER (WHERE finished IS NOT NULL) AS n"
        " FROM {schema}.executions WHERE job_id = ANY(%s) GROUP BY job_id",
        (job_ids,),
    )
    return {row["job_id"]: row["n"] for row in rows}


def kill_the_worker_running(env: FaultEnv, workers: list[Any], job_id: int) -> None:
    first = wait_started(env.probe, job_id, timeout=20)
    victim = by_pid(workers, first["pid"])
    victim.send(signal.SIGKILL)
    assert victim.wait_exit(5) == -signal.SIGKILL
    wait_started(env.probe, job_id, attempt=2, timeout=RESCUE_BOUND + 5)


def test_sigkill_mid_chain_runs_each_step_to_completion_once(env: FaultEnv) -> None:
    sleep, noop = env.tasks.sleep, env.tasks.noop
    workflow = chain(
        sleep.si(0.05), sleep.si(DOOMED, retry_seconds=0.2), sleep.si(0.05), noop.si()
    ).delay()
    ids = workflow_job_ids(env, workflow.id)
    workers = env.workers(2, "--concurrency=2")
    kill_the_worker_running(env, workers, ids[1])
    wait_status(env.probe, ids[-1], "done", timeout=RESCUE_BOUND + 20)
    assert workflow.status == "done"
    assert_invariants(env.probe, ids)
    assert completions(env, ids[:-1]) == {job_id: 1 for job_id in ids[:-1]}
    assert [row["attempt"] for row in env.probe.executions(ids[1])] == [1, 2]


def test_sigkill_mid_chord_starts_the_callback_once_with_every_result(env: FaultEnv) -> None:
    sleep, collect = env.tasks.sleep, env.tasks.collect
    others = [sleep.si(0.05 * n) for n in range(1, 6)]
    workflows = [
        chord(group([sleep.si(first, retry_seconds=0.2), *others]), collect.s()).delay()
        for first in (DOOMED, 3.0, 3.0, 3.0)
    ]
    workers = env.workers(2, "--concurrency=4")
    first_member = workflow_job_ids(env, workflows[0].id)[0]
    kill_the_worker_running(env, workers, first_member)
    expected = [0.05 * n for n in range(1, 6)]
    all_ids: list[int] = []
    for workflow in workflows:
        ids = workflow_job_ids(env, workflow.id)
        all_ids += ids
        result = workflow.get(timeout=RESCUE_BOUND + 30)
        assert len(result) == 6
        assert result[1:] == expected
        # 0.2 when its first attempt was killed (the first workflow's always is)
        assert result[0] == 0.2 if workflow is workflows[0] else result[0] in (3.0, 0.2)
        # The callback started once, after every member was done: one execution.
        callback = env.probe.job(ids[-1])
        assert callback["attempts"] == 1
        assert len(env.probe.executions(ids[-1])) == 1
        # A member runs to completion once per attempt at most; one that was not on the
        # killed worker, exactly once (a member killed after its code ended but before
        # its outcome was written runs again: at-least-once).
        finished = completions(env, ids)
        for job_id in ids[:-1]:
            attempts = env.probe.job(job_id)["attempts"]
            assert 1 <= finished[job_id] <= attempts, (job_id, finished[job_id], attempts)
            if attempts == 1:
                assert finished[job_id] == 1
    assert workflow_job_ids(env, workflows[0].id)[0] == first_member
    assert env.probe.job(first_member)["attempts"] == 2
    assert_invariants(env.probe, all_ids)


def test_sigkill_mid_nested_chord_starts_each_callback_once(env: FaultEnv) -> None:
    """chord([a1, chord([b1, b2], cy), a3], cx) with b1's worker killed: b1 runs again on
    the other worker; cy starts once with [b1, b2], cx once with [a1, cy, a3]."""
    sleep, collect = env.tasks.sleep, env.tasks.collect
    workflows = [
        chord(
            [
                sleep.si(0.01),
                chord([sleep.si(first, retry_seconds=0.2), sleep.si(0.02)], collect.s()),
                sleep.si(0.04),
            ],
            collect.s(),
        ).delay()
        for first in (DOOMED, 3.0, 3.0)
    ]
    workers = env.workers(2, "--concurrency=4")
    b1 = workflow_job_ids(env, workflows[0].id)[1]
    kill_the_worker_running(env, workers, b1)
    all_ids: list[int] = []
    for workflow in workflows:
        ids = workflow_job_ids(env, workflow.id)
        all_ids += ids
        a1, inner, a3 = workflow.get(timeout=RESCUE_BOUND + 30)
        assert (a1, a3) == (0.01, 0.04)
        assert inner[0] == 0.2 if workflow is workflows[0] else inner[0] in (3.0, 0.2)
        assert inner[1] == 0.02
        cy, cx = ids[3], ids[5]
        for callback in (cy, cx):
            assert env.probe.job(callback)["attempts"] == 1
            assert len(env.probe.executions(callback)) == 1
    assert env.probe.job(b1)["attempts"] == 2
    assert_invariants(env.probe, all_ids)
