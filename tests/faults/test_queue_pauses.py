"""Pausing a queue while two ``pgtasks worker`` processes are busy with it (migration 0007):
no job of the queue is claimed once the pause took effect (one poll interval), the jobs
running at the pause finish, the other queue carries on, and resume drains the rest."""

from __future__ import annotations

from datetime import timedelta

from tests.support.faults import FaultEnv
from tests.support.probe import assert_invariants, wait_all_finished
from tests.support.processes import POLL_INTERVAL
from tests.support.waiting import wait_until

HOT = "hot"
#: Scheduling slack on a shared machine beyond the poll interval the pause may take: the
#: listener thread's turn and a claim round trip already in flight at the pause.
SLACK = timedelta(seconds=0.3)


def test_a_queue_paused_under_load_is_claimed_by_no_worker_after_one_poll_interval(
    env: FaultEnv,
) -> None:
    app, probe, sleep = env.app, env.probe, env.tasks.sleep
    hot = [sleep.apply_async([0.05], queue=HOT) for _ in range(300)]
    other = [sleep.apply_async([0.05]) for _ in range(40)]
    for _ in range(2):
        env.worker("--concurrency=2")

    def hot_started() -> int:
        rows = probe.rows(
            "SELECT count(*) AS n FROM {schema}.executions"
            " JOIN {schema}.all_jobs AS jobs ON jobs.id = executions.job_id WHERE jobs.queue = %s",
            [HOT],
        )
        return int(rows[0]["n"])

    wait_until(lambda: hot_started() >= 10, timeout=20, message="both workers busy with it")
    assert app.pause_queue(HOT)
    paused_at = probe.rows("SELECT paused_at FROM {schema}.queue_pauses")[0]["paused_at"]

    # The other queue drains while the paused one waits.
    wait_until(
        lambda: all(probe.job(job.id)["status"] == "done" for job in other),
        timeout=30,
        message="the jobs of the other queue to finish",
    )
    # The jobs running at the pause finish; none is claimed after the pause took effect.
    wait_until(
        lambda: (
            not probe.rows(
                "SELECT id FROM {schema}.all_jobs WHERE queue = %s AND status = 'running'", [HOT]
            )
        ),
        timeout=10,
        message="the paused queue's running jobs to finish",
    )
    claimed = probe.rows(
        "SELECT max(locked_at) AS last, count(*) FILTER (WHERE status = 'pending') AS pending"
        " FROM {schema}.all_jobs WHERE queue = %s",
        [HOT],
    )[0]
    lag = (claimed["last"] - paused_at).total_seconds()
    print(f"\n[pause] last claim of the paused queue {lag:+.3f} s after the pause")
    assert claimed["last"] <= paused_at + timedelta(seconds=POLL_INTERVAL) + SLACK
    assert claimed["pending"] > 0
    started_late = probe.rows(
        "SELECT executions.job_id FROM {schema}.executions"
        " JOIN {schema}.all_jobs AS jobs ON jobs.id = executions.job_id"
        " WHERE jobs.queue = %s AND executions.started > %s",
        [HOT, paused_at + timedelta(seconds=POLL_INTERVAL) + SLACK],
    )
    assert started_late == []

    assert app.resume_queue(HOT)
    wait_all_finished(probe, len(hot) + len(other), timeout=60)
    assert_invariants(probe, [job.id for job in hot + other])
