"""Lost connections, partitions and shutdown under them (scenarios 9, 11 and 14 of the
fault suite; see docs/guarantees.md)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.faults import FaultEnv
from tests.support.probe import assert_invariants, wait_all_finished, wait_started, wait_status
from tests.support.processes import LEASE_TIMEOUT, TIMING_FLAGS
from tests.support.proxy import Proxy
from tests.support.servers import PrivateServer, terminate_backends
from tests.support.waiting import sleep_past, wait_until

StartPrivate = Callable[..., tuple[FaultEnv, PrivateServer]]


#: The last query of a worker's listener connection: its LISTEN, or the read of the
#: paused queues it runs every half poll interval after it, or (a worker that stored no
#: limit) the count of stored limits that follows that read.
LISTENER_QUERIES = ["LISTEN%", "%queue_pauses%", "%count(*) AS stored FROM %.limits;"]


def listening(env: FaultEnv, pid: int) -> bool:
    rows = env.probe.rows(
        "SELECT count(*) AS n FROM pg_stat_activity"
        " WHERE application_name LIKE %s AND query LIKE ANY(%s)",
        (f"pgtasks worker %:{pid}", LISTENER_QUERIES),
    )
    return bool(rows[0]["n"])


def test_terminated_backends_of_idle_busy_and_listening_workers_recover(env: FaultEnv) -> None:
    # A long poll interval: only a notification starts a job within a second.
    timing = (*TIMING_FLAGS[:3], "--poll-interval=30")
    worker = env.worker("--concurrency=2", timing=timing)
    sessions = f"pgtasks worker %:{worker.pid}"
    wait_until(lambda: listening(env, worker.pid), message="the worker to LISTEN")

    # Idle: every session of the worker is terminated; the next job still runs.
    assert terminate_backends(env.dsn, sessions) >= 2
    idle = env.tasks.noop.delay()
    wait_status(env.probe, idle.id, "done", timeout=10)

    # Busy: sessions terminated while a job runs; it completes once, under its lease.
    busy = env.tasks.sleep.delay(1.0)
    wait_started(env.probe, busy.id)
    assert terminate_backends(env.dsn, sessions) >= 1
    row = wait_status(env.probe, busy.id, "done", timeout=10)
    assert row["attempts"] == 1

    # LISTEN: a job enqueued while the listener is gone is fetched when it returns, and a
    # job enqueued after it is back starts within 1 s (the poll is 30 s away).
    wait_until(lambda: listening(env, worker.pid), message="the worker to LISTEN again")
    assert terminate_backends(env.dsn, sessions, *LISTENER_QUERIES) == 1
    missed = env.tasks.noop.delay()
    wait_status(env.probe, missed.id, "done", timeout=5)
    wait_until(lambda: listening(env, worker.pid), message="the worker to LISTEN again")
    enqueued = time.monotonic()
    fresh = env.tasks.sleep.delay(0.0)
    wait_started(env.probe, fresh.id, timeout=5)
    latency = time.monotonic() - enqueued
    print(f"\n[fault 9] job start after the LISTEN connection returned: {latency:.3f} s")
    assert latency < 1.0
    wait_status(env.probe, fresh.id, "done", timeout=5)  # started is not finished yet
    assert worker.alive()
    assert_invariants(env.probe, [idle.id, busy.id, missed.id, fresh.id])


@pytest.fixture
def proxied(private_env: StartPrivate) -> Iterator[tuple[FaultEnv, Proxy]]:
    """A private TCP server and a proxy in front of it; the env's DSN is the direct one."""
    env, server = private_env(tcp=True)
    assert server.port is not None
    proxy = Proxy("127.0.0.1", server.port)
    yield env, proxy
    proxy.close()


def proxy_dsn(env: FaultEnv, proxy: Proxy) -> str:
    return env.dsn.replace(f":{env.dsn.rsplit(':', 1)[1].split('/')[0]}/", f":{proxy.port}/")


def test_a_partition_longer_than_the_lease_loses_nothing_and_reruns_expired_leases_once(
    proxied: tuple[FaultEnv, Proxy],
) -> None:
    env, proxy = proxied
    through_proxy = proxy_dsn(env, proxy)
    # The worker behind the proxy is partitioned; a second one (direct) keeps working.
    partitioned = env.worker("--concurrency=4", dsn=through_proxy)
    direct = env.worker("--concurrency=4")
    handles = env.tasks.sleep.delay_many([{"seconds": 0.3}] * 200)
    wait_until(lambda: partitioned.log().count(" done in ") >= 5, timeout=20)

    proxy.set_mode("blackhole")
    sleep_past(2 * LEASE_TIMEOUT)
    proxy.set_mode("pass")
    wait_all_finished(env.probe, 200, timeout=60)
    assert partitioned.alive() and direct.alive()
    log = partitioned.log()
    assert log.count("Traceback") == 0, log
    for worker in (partitioned, direct):
        worker.send(signal.SIGTERM)
        assert worker.wait_exit(15) == 0
    # Expired leases ran again (rescued by the direct worker), each at most once more.
    per_job = env.probe.rows(
        "SELECT job_id, count(*) AS n FROM {schema}.executions GROUP BY job_id HAVING count(*) > 1"
    )
    print(f"\n[fault 11] jobs run twice after a {2 * LEASE_TIMEOUT:g} s partition: {len(per_job)}")
    assert all(row["n"] == 2 for row in per_job), per_job
    assert_invariants(env.probe, [handle.id for handle in handles])


def test_sigterm_while_the_database_is_blackholed_still_exits_within_grace_plus_10_s(
    proxied: tuple[FaultEnv, Proxy], tmp_path: Path
) -> None:
    env, proxy = proxied
    grace = 2.0
    release = tmp_path / "release"
    worker = env.worker(f"--shutdown-timeout={grace}", dsn=proxy_dsn(env, proxy))
    job = env.tasks.wait_for_file.delay(str(release))
    wait_started(env.probe, job.id)
    proxy.set_mode("blackhole")
    signalled = time.monotonic()
    worker.send(signal.SIGTERM)
    code = worker.wait_exit(grace + 15)
    took = time.monotonic() - signalled
    print(f"\n[fault 14] SIGTERM with the database blackholed: exit {code} after {took:.2f} s")
    assert took <= grace + 10
    log = worker.log()
    # Stuck in a final write (bounded), or in the claim loop's read (the exit watchdog).
    assert "did not complete within" in log or "did not stop within" in log, log
    # The job could not be released: a live worker rescues it after the lease.
    proxy.set_mode("pass")
    release.touch()
    env.worker()
    wait_all_finished(env.probe, 1, timeout=LEASE_TIMEOUT + 10)
    # The release the worker sent into the blackhole may arrive once traffic flows again
    # (the proxy buffered it): then the attempt was returned, as for any release.
    assert_invariants(env.probe, [job.id], released=True)


def test_sigterm_variants_finish_release_or_exit_at_once(env: FaultEnv, tmp_path: Path) -> None:
    # Shorter than the grace period: they finish, heartbeats continue, exit 0.
    worker = env.worker("--shutdown-timeout=10", "--concurrency=2")
    short = env.tasks.sleep.delay(1.5)
    wait_started(env.probe, short.id)
    beats = env.probe.rows("SELECT heartbeat_at FROM {schema}.workers")[0]["heartbeat_at"]
    worker.send(signal.SIGTERM)
    wait_until(
        lambda: (
            (rows := env.probe.rows("SELECT heartbeat_at FROM {schema}.workers"))
            and rows[0]["heartbeat_at"] > beats
        ),
        message="a heartbeat after SIGTERM",
    )
    assert worker.wait_exit(10) == 0
    assert env.probe.job(short.id)["status"] == "done"

    # Longer: released to pending at the deadline, exit within grace + 5 s.
    release = tmp_path / "release"
    worker = env.worker("--shutdown-timeout=1", "--concurrency=2")
    long = env.tasks.wait_for_file.delay(str(release), timeout=60)
    wait_started(env.probe, long.id)
    signalled = time.monotonic()
    worker.send(signal.SIGTERM)
    assert worker.wait_exit(1 + 5) == 0
    took = time.monotonic() - signalled
    print(f"\n[fault 14] SIGTERM with a long job, grace 1 s: exit after {took:.2f} s")
    row = env.probe.job(long.id)
    assert (row["status"], row["attempts"]) == ("pending", 0)

    # A second signal: exit within 1 s.
    worker = env.worker("--shutdown-timeout=30", "--concurrency=2")
    wait_status(env.probe, long.id, "running")
    worker.send(signal.SIGINT)
    worker.wait_for_log("SIGINT received")
    signalled = time.monotonic()
    worker.send(signal.SIGTERM)
    assert worker.wait_exit(5) == 0
    took = time.monotonic() - signalled
    print(f"[fault 14] second signal: exit after {took:.2f} s")
    assert took < 1.0

    worker = env.worker("--concurrency=2")
    release.touch()
    wait_status(env.probe, long.id, "done")
    worker.send(signal.SIGTERM)
    assert worker.wait_exit(10) == 0
    assert_invariants(env.probe, [short.id, long.id], released=True)
