"""Crashes and stalls of worker processes: SIGKILL, SIGSTOP/SIGCONT, a poison job, a
long job (scenarios 4, 5, 7 and 8 of the fault suite; see docs/guarantees.md)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.support.faults import FaultEnv
from tests.support.probe import assert_invariants, wait_started, wait_status
from tests.support.processes import LEASE_TIMEOUT, RESCUE_BOUND, by_pid
from tests.support.waiting import wait_until


def test_job_of_a_sigkilled_worker_runs_again_once_within_the_rescue_bound(env: FaultEnv) -> None:
    workers = env.workers(2, "--concurrency=2")
    job = env.tasks.sleep.delay(3.0, retry_seconds=0.2)
    first = wait_started(env.probe, job.id)
    victim = by_pid(workers, first["pid"])
    survivor = next(worker for worker in workers if worker is not victim)

    killed_at = time.monotonic()
    victim.send(signal.SIGKILL)
    assert victim.wait_exit(5) == -signal.SIGKILL
    second = wait_started(env.probe, job.id, attempt=2, timeout=RESCUE_BOUND + 2)
    rescue_time = time.monotonic() - killed_at
    print(f"\n[fault 4] re-run after SIGKILL: {rescue_time:.2f} s (bound {RESCUE_BOUND:.2f} s)")
    assert rescue_time <= RESCUE_BOUND
    assert second["pid"] == survivor.pid

    wait_status(env.probe, job.id, "done")
    assert [row["attempt"] for row in env.probe.executions(job.id)] == [1, 2]
    assert_invariants(env.probe, [job.id])


def test_stale_writes_of_a_stopped_worker_change_nothing_and_are_logged(
    env: FaultEnv, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    stale = env.worker("--concurrency=2")
    stale_id = stale.worker_id()
    finishing = env.tasks.wait_for_file.delay(str(release))
    failing = env.tasks.fail_after_file.delay(str(release))
    wait_started(env.probe, finishing.id)
    wait_started(env.probe, failing.id)

    stopped_at = time.monotonic()
    stale.send(signal.SIGSTOP)
    other = env.worker("--concurrency=2")
    release.touch()  # the rescued attempts finish at once; the stale ones wait for SIGCONT
    for job in (finishing, failing):
        wait_started(env.probe, job.id, attempt=2, timeout=RESCUE_BOUND + 5)
    rescue_time = time.monotonic() - stopped_at
    print(f"\n[fault 5] re-run after SIGSTOP: {rescue_time:.2f} s (bound {RESCUE_BOUND:.2f} s)")
    assert rescue_time <= RESCUE_BOUND + 1.0  # includes starting the second worker
    done = wait_status(env.probe, finishing.id, "done")
    # The failure is retried (attempt 3 by then, or pending): wait for a state that is stable.
    failing_row = wait_until(
        lambda: (row := env.probe.job(failing.id))["status"] != "running" and row,
        message="the failing job to leave running",
    )
    before = env.probe.rows(
        "SELECT id, status, attempts, locked_by, result, last_error, run_at, updated_at"
        " FROM {schema}.all_jobs ORDER BY id"
    )
    assert done["locked_by"] == other.worker_id()
    del failing_row
    # The rescuer removes the silent registration right after rescuing its jobs: wait for
    # it, so that the stale worker surely finds itself removed when it wakes up.
    wait_until(
        lambda: not env.probe.rows("SELECT id FROM {schema}.workers WHERE id = %s", (stale_id,)),
        message=f"the stopped worker's registration {stale_id} to be removed",
    )

    stale.send(signal.SIGCONT)
    log = stale.wait_for_log(f"job {finishing.id} worker_app.wait_for_file attempt 1: lease lost")
    log = stale.wait_for_log(f"job {failing.id} fault_app.fail_after_file attempt 1: lease lost")
    log = stale.wait_for_log("re-registered")
    assert "outcome done discarded" in log or "discarded" in log
    assert f"registration {stale_id} was removed" in log
    # Stop the other worker, so that nothing but stale writes could change the rows.
    other.send(signal.SIGTERM)
    stale.send(signal.SIGTERM)
    assert other.wait_exit(15) == 0
    assert stale.wait_exit(15) == 0
    after = env.probe.rows(
        "SELECT id, status, attempts, locked_by, result, last_error, run_at, updated_at"
        " FROM {schema}.all_jobs ORDER BY id"
    )
    # The finished job is untouched by the stale completion; the failing job may only
    # have moved on through the other worker's retries (never through the stale lease).
    assert after[0] == before[0]
    assert env.probe.rows(
        "SELECT count(*) AS n FROM {schema}.all_jobs WHERE locked_by = %s", (stale_id,)
    ) == [{"n": 0}]
    assert_invariants(env.probe, [finishing.id], executed=True)


def test_poison_job_runs_exactly_max_attempts_times_and_jobs_behind_it_finish(
    env: FaultEnv,
) -> None:
    poison = env.tasks.poison.delay()
    behind = env.tasks.noop.delay_many([{}] * 500)
    ids = [poison.id] + [handle.id for handle in behind]
    workers = [env.worker("--concurrency=4", wait_started=False) for _ in range(2)]

    def finished_with_respawn() -> bool:
        # A supervisor's job: restart workers the poison job killed.
        for index, worker in enumerate(workers):
            if not worker.alive():
                assert worker.process.returncode == 137, worker.log()
                workers[index] = env.worker("--concurrency=4", wait_started=False)
        counts = env.probe.status_counts()
        return counts.get("done", 0) == 500 and counts.get("failed", 0) == 1

    wait_until(finished_with_respawn, timeout=90, interval=0.05, message="all jobs finished")
    row = env.probe.job(poison.id)
    assert (row["status"], row["attempts"]) == ("failed", 3)
    assert "WorkerLostError" in row["last_error"] and "was lost" in row["last_error"]
    assert [e["attempt"] for e in env.probe.executions(poison.id)] == [1, 2, 3]
    assert_invariants(env.probe, ids, failed={poison.id})


def test_a_long_job_of_a_heartbeating_worker_is_never_rescued(env: FaultEnv) -> None:
    workers = env.workers(2, "--concurrency=2")
    job = env.tasks.sleep.delay(3 * LEASE_TIMEOUT)
    wait_started(env.probe, job.id)
    row = wait_status(env.probe, job.id, "done", timeout=3 * LEASE_TIMEOUT + 5)
    assert row["attempts"] == 1
    assert len(env.probe.executions(job.id)) == 1
    for worker in workers:
        assert "rescued job" not in worker.log()
    assert_invariants(env.probe, [job.id])


def test_a_batch_of_a_sigkilled_worker_is_rescued_whole_and_each_job_finished_once(
    env: FaultEnv, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    victim = env.worker("--concurrency=2")
    jobs = env.tasks.batch_until_file.delay_many([{"path": str(release)} for _ in range(300)])
    ids = [job.id for job in jobs]
    wait_until(
        lambda: len(env.probe.rows("SELECT id FROM {schema}.executions WHERE attempt = 1")) == 300,
        message="the batch of 300 to start",
    )
    running = env.probe.rows("SELECT count(*) AS n FROM {schema}.jobs WHERE status = 'running'")
    assert running[0]["n"] == 300  # one batch holds every job, each under its own lease

    victim.send(signal.SIGKILL)
    assert victim.wait_exit(5) == -signal.SIGKILL
    release.touch()
    env.worker("--concurrency=2")
    for job_id in ids:
        wait_status(env.probe, job_id, "done", timeout=RESCUE_BOUND + 20)
    attempts = env.probe.rows("SELECT DISTINCT attempts FROM {schema}.all_jobs")
    assert [row["attempts"] for row in attempts] == [2]  # rescued once, run once more
    assert_invariants(env.probe, ids)


def test_a_batch_handler_that_raises_for_one_job_of_500_retries_that_job_alone(
    env: FaultEnv,
) -> None:
    jobs = env.tasks.batch_one_fails.delay_many([{"fail": n == 250} for n in range(500)])
    ids = [job.id for job in jobs]
    env.worker("--concurrency=2")
    for job_id in (ids[250], ids[0], ids[-1]):
        wait_status(env.probe, job_id, "done", timeout=30)
    wait_until(
        lambda: env.probe.rows("SELECT count(*) AS n FROM {schema}.jobs")[0]["n"] == 0,
        message="every job to end",
    )
    retried = env.probe.rows("SELECT id, attempts FROM {schema}.all_jobs WHERE attempts > 1")
    assert [(row["id"], row["attempts"]) for row in retried] == [(ids[250], 2)]
    runs = env.probe.rows("SELECT count(*) AS n FROM {schema}.executions")[0]["n"]
    assert runs == 501  # every job once, the failed one once more
    assert_invariants(env.probe, ids)
