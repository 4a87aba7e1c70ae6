"""A job unique while active keeps its key through its worker's SIGKILL and rescue, and
frees it once it finishes (see docs/howto/flow-control.md, Uniqueness)."""

from __future__ import annotations

import signal

from tests.support.faults import FaultEnv
from tests.support.probe import assert_invariants, wait_started, wait_status
from tests.support.processes import RESCUE_BOUND, by_pid


def test_the_key_of_a_sigkilled_workers_job_stays_held_until_the_rescued_job_finishes(
    env: FaultEnv,
) -> None:
    workers = env.workers(2, "--concurrency=2")
    key = {"idempotency_key": "nightly-import", "unique_while": "active"}
    job = env.tasks.sleep.apply_async([3.0], {"retry_seconds": 1.0}, **key)
    first = wait_started(env.probe, job.id)
    victim = by_pid(workers, first["pid"])

    victim.send(signal.SIGKILL)
    assert victim.wait_exit(5) == -signal.SIGKILL
    # Its lease is dead but the row is still running: the key is held.
    during_crash = env.tasks.sleep.apply_async([0.0], **key)
    wait_started(env.probe, job.id, attempt=2, timeout=RESCUE_BOUND + 2)
    during_rescue = env.tasks.sleep.apply_async([0.0], **key)
    wait_status(env.probe, job.id, "done")
    after = env.tasks.sleep.apply_async([0.0], **key)
    wait_status(env.probe, after.id, "done")

    assert (during_crash.id, during_crash.existed) == (job.id, True)
    assert (during_rescue.id, during_rescue.existed) == (job.id, True)
    assert after.id != job.id and not after.existed
    assert [row["attempt"] for row in env.probe.executions(job.id)] == [1, 2]
    assert_invariants(env.probe, [job.id, after.id])
