"""The counters of exercised guarantees under the faults that exercise them, in real
``pgtasks worker`` processes and real signals, read with ``pgtasks stats --json``: a
SIGKILLed worker's jobs count as rescued (exactly the jobs it held), a SIGSTOPped
worker's late outcomes as lost leases and refused fenced writes, a worker stopped with
jobs still running as releases."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from pgtasks._counters import COUNTER_NAMES
from tests.support.cli import cli_runner
from tests.support.faults import APP_PATH, FaultEnv
from tests.support.probe import assert_invariants, wait_started, wait_status
from tests.support.processes import RESCUE_BOUND
from tests.support.waiting import wait_until


def stats_counters(env: FaultEnv) -> dict[str, int]:
    """The counters of ``pgtasks stats --json`` (every process's totals)."""
    result = cli_runner(env.app, APP_PATH)("stats", "--json")
    assert result.returncode == 0, result.stderr
    counters: dict[str, int] = json.loads(result.stdout)["counters"]
    assert set(counters) == set(COUNTER_NAMES)
    return counters


def changed(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The counters that moved, and by how much."""
    return {name: after[name] - before[name] for name in after if after[name] != before[name]}


def test_a_sigkilled_worker_increments_rescued_by_exactly_the_jobs_it_held(
    env: FaultEnv, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    before = stats_counters(env)
    victim = env.worker("--concurrency=3")
    held = [env.tasks.wait_for_file.delay(str(release)) for _ in range(3)]
    for job in held:
        wait_started(env.probe, job.id)

    victim.send(signal.SIGKILL)
    assert victim.wait_exit(5) == -signal.SIGKILL
    survivor = env.worker("--concurrency=3")
    for job in held:
        wait_started(env.probe, job.id, attempt=2, timeout=RESCUE_BOUND + 5)
    release.touch()
    for job in held:
        wait_status(env.probe, job.id, "done")
    survivor.send(signal.SIGTERM)
    assert survivor.wait_exit(15) == 0

    assert changed(before, stats_counters(env)) == {"rescued": 3}
    assert survivor.log().count("rescued job ") == 3
    assert_invariants(env.probe, [job.id for job in held], executed=True)


def test_a_sigstopped_worker_increments_lease_lost_and_refused_fenced_writes(
    env: FaultEnv, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    before = stats_counters(env)
    stale = env.worker("--concurrency=2")
    stale_id = stale.worker_id()
    held = [env.tasks.wait_for_file.delay(str(release)) for _ in range(2)]
    for job in held:
        wait_started(env.probe, job.id)

    stale.send(signal.SIGSTOP)
    other = env.worker("--concurrency=2")
    for job in held:
        wait_started(env.probe, job.id, attempt=2, timeout=RESCUE_BOUND + 5)
    release.touch()  # both attempts finish: the rescued ones at once, the stale ones later
    for job in held:
        wait_status(env.probe, job.id, "done")
    wait_until(
        lambda: not env.probe.rows("SELECT id FROM {schema}.workers WHERE id = %s", (stale_id,)),
        message=f"the stopped worker's registration {stale_id} to be removed",
    )
    rescued = stats_counters(env)
    assert changed(before, rescued) == {"rescued": 2}

    stale.send(signal.SIGCONT)
    for job in held:
        stale.wait_for_log(f"job {job.id} worker_app.wait_for_file attempt 1: lease lost")
    # Counted as the outcomes were refused; stored with a heartbeat or, at the latest,
    # when the worker stops.
    stale.send(signal.SIGTERM)
    other.send(signal.SIGTERM)
    assert stale.wait_exit(15) == 0
    assert other.wait_exit(15) == 0

    assert changed(rescued, stats_counters(env)) == {"lease_lost": 2, "fenced_writes_refused": 2}
    assert_invariants(env.probe, [job.id for job in held], executed=True)


def test_a_worker_stopped_with_running_jobs_counts_them_released(
    env: FaultEnv, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    before = stats_counters(env)
    worker = env.worker("--concurrency=2", "--shutdown-timeout=0.5")
    held = [env.tasks.wait_for_file.delay(str(release)) for _ in range(2)]
    for job in held:
        wait_started(env.probe, job.id)

    worker.send(signal.SIGTERM)
    assert worker.wait_exit(15) == 0

    assert changed(before, stats_counters(env)) == {"released_at_shutdown": 2}
    assert {env.probe.job(job.id)["status"] for job in held} == {"pending"}
    release.touch()
