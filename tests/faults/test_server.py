"""The server itself fails: restart under load, read-only (scenarios 10 and 12 of the fault
suite; see docs/guarantees.md). Each test has a private PostgreSQL."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable

import psycopg

from tests.support.faults import FaultEnv
from tests.support.probe import assert_invariants, safe_counts, wait_all_finished
from tests.support.servers import PrivateServer, set_read_only
from tests.support.waiting import sleep_past, wait_until

StartPrivate = Callable[..., tuple[FaultEnv, PrivateServer]]
LOOPS = ("claim loop", "heartbeat", "rescuer", "listener", "pruner")


def test_every_loop_resumes_within_10_s_of_a_server_restart_under_load(
    private_env: StartPrivate,
) -> None:
    env, server = private_env()
    workers = env.workers(4, "--concurrency=2", PGTASKS_TEST_PRUNE_INTERVAL="0.5")
    beat = env.beat()
    handles = env.tasks.sleep.delay_many([{"seconds": 0.05}] * 400)
    wait_until(lambda: safe_counts(env.probe).get("done", 0) >= 40, timeout=20)
    wait_until(
        lambda: (
            env.probe.rows(
                "SELECT count(*) AS n FROM {schema}.all_jobs WHERE task_name = 'fault_app.tick'"
            )[0]["n"]
            >= 1
        ),
        timeout=15,
        message="a first periodic job",
    )

    server.restart()
    restarted = time.monotonic()

    def resumed() -> bool:
        try:
            rows = env.probe.rows(
                "SELECT count(*) FILTER (WHERE task_name = 'fault_app.tick'"
                "   AND created_at > pg_postmaster_start_time()) AS ticks,"
                " count(*) FILTER (WHERE task_name = 'worker_app.sleep' AND status = 'done'"
                "   AND finished_at > pg_postmaster_start_time()) AS done"
                " FROM {schema}.all_jobs"
            )
            beating = env.probe.rows(
                "SELECT count(*) AS n FROM {schema}.workers"
                " WHERE heartbeat_at > pg_postmaster_start_time()"
            )
        except psycopg.OperationalError:
            return False
        return rows[0]["ticks"] >= 1 and rows[0]["done"] >= 1 and beating[0]["n"] == 4

    def reconnected(loop: str, log: str) -> bool:
        if re.search(rf"{loop} of worker \S+: database reachable again", log):
            return True
        # A loop whose connection was not in use during the restart (a pruner between
        # passes that reconnected before its next one) never saw an error to recover from.
        return loop == "pruner" and not re.search(rf"{loop} of worker \S+: database error", log)

    def every_loop_reconnected() -> bool:
        logs = [worker.log() for worker in workers]
        return all(reconnected(loop, log) for log in logs for loop in LOOPS) and resumed()

    wait_until(
        every_loop_reconnected,
        timeout=10,
        interval=0.1,
        message="every loop of every worker, and the beat, to make progress",
    )
    print(
        f"\n[fault 10] every loop made progress {time.monotonic() - restarted:.2f} s after"
        " the restart"
    )
    assert "beat lost the database" in beat.log()
    sleeps = [handle.id for handle in handles]
    wait_until(
        lambda: (
            env.probe.rows(
                "SELECT count(*) AS n FROM {schema}.all_jobs"
                " WHERE task_name = 'worker_app.sleep' AND status = 'done'"
            )[0]["n"]
            == 400
        ),
        timeout=40,
        message="400 jobs done",
    )
    beat.send(signal.SIGTERM)
    assert beat.wait_exit(10) == 0
    for worker in workers:
        assert worker.alive()
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait_exit(15) == 0
    ids = [row["id"] for row in env.probe.rows("SELECT id FROM {schema}.all_jobs")]
    assert set(sleeps) <= set(ids)
    assert_invariants(env.probe, ids)


def test_a_read_only_database_logs_at_a_bounded_rate_and_processing_resumes(
    private_env: StartPrivate,
) -> None:
    env, server = private_env()
    worker = env.worker("--concurrency=2")
    first = env.tasks.noop.delay_many([{}] * 20)
    wait_all_finished(env.probe, 20)

    set_read_only(server.dsn, "postgres", True)
    sleep_past(10.0)
    # A loop whose first error was its terminated session names the refusal when it logs
    # again, 10 s after that first line: wait for it rather than for a fixed moment.
    wait_until(
        lambda: "read-only" in worker.log(), timeout=10, message="the read-only refusal logged"
    )
    during = worker.log()
    set_read_only(server.dsn, "postgres", False)
    env.app.close()  # its pooled sessions were read-only
    after = env.tasks.noop.delay_many([{}] * 20)
    wait_all_finished(env.probe, 40, timeout=20)

    warnings = [line for line in during.splitlines() if "database error" in line]
    print(
        f"\n[fault 12] {len(warnings)} warning lines in 10 s of read-only; first:"
        f" {warnings[0] if warnings else None}"
    )
    # Each loop logs a continuing failure once, then at most every 10 s.
    assert 1 <= len(warnings) <= 2 * len(LOOPS), "\n".join(warnings)
    # The first lines report the terminated sessions; the read-only refusal is named.
    assert any("read-only" in line for line in warnings), "\n".join(warnings)
    assert "Traceback" not in during
    assert worker.alive()
    assert_invariants(env.probe, [handle.id for handle in [*first, *after]])
