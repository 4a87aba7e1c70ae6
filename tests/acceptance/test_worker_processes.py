"""Real ``pgtasks worker`` processes, real signals, a real PostgreSQL.

Each test runs workers as subprocesses on ``tests.apps.worker_app:app`` in the test's
own schema; their tasks record every execution in ``<schema>.executions`` so the tests
can count how often each job ran and by which process. Tests wait on SQL conditions
or log contents (``wait_until``), never on sleeps. Measured figures are printed
(``pytest -s`` shows them).
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import conninfo

from pgtasks import App
from tests.apps.worker_app import Tasks, create_executions_table, register_tasks
from tests.support.environment import ROOT, pgtasks_command, pgtasks_env
from tests.support.probe import Probe, wait_started, wait_status
from tests.support.processes import RESCUE_BOUND, TIMING_FLAGS, ChildProcess, Processes, by_pid
from tests.support.schemas import new_schema_name
from tests.support.servers import PrivateServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

APP_PATH = "tests.apps.worker_app:app"
PASSWORD = "S3cr3t!"

SpawnWorker = Callable[..., ChildProcess]


@pytest.fixture
def spawn_worker(tmp_path: Path) -> Iterator[SpawnWorker]:
    """Start ``pgtasks worker`` processes; every one still running is killed afterwards."""
    processes = Processes(tmp_path, APP_PATH)
    yield processes.worker
    processes.close()


@dataclasses.dataclass
class Setup:
    """A migrated schema with the executions table, its tasks and a probe."""

    dsn: str
    app: App
    tasks: Tasks
    probe: Probe

    @property
    def schema(self) -> str:
        return self.app.schema


Prepare = Callable[[App, str], Setup]


@pytest.fixture
def prepare() -> Iterator[Prepare]:
    """Add the executions table to a migrated App's schema; probes are closed afterwards."""
    probes: list[Probe] = []

    def prepare_schema(app: App, dsn: str) -> Setup:
        with psycopg.connect(dsn, autocommit=True) as conn:
            create_executions_table(conn, app.schema)
        probes.append(Probe(dsn, app.schema))
        return Setup(dsn, app, register_tasks(app), probes[-1])

    yield prepare_schema
    for probe in probes:
        probe.close()


@pytest.fixture
def setup(dsn: str, make_app: Callable[..., App], prepare: Prepare) -> Setup:
    return prepare(make_app(), dsn)


# -- many workers --


def test_several_workers_run_every_job_exactly_once(
    setup: Setup, spawn_worker: SpawnWorker
) -> None:
    workers = [spawn_worker(setup.dsn, setup.schema, "--concurrency=10") for _ in range(3)]
    started = time.monotonic()
    handles = setup.tasks.noop.delay_many([{}] * 2000)
    assert len({handle.id for handle in handles}) == 2000

    wait_until(
        lambda: setup.probe.status_counts() == {"done": 2000},
        timeout=40,
        message="2,000 jobs done",
    )
    elapsed = time.monotonic() - started
    per_job = setup.probe.executions_per_job()
    assert set(per_job) == {handle.id for handle in handles}
    assert max(per_job.values()) == 1, {job: n for job, n in per_job.items() if n > 1}
    pids = setup.probe.rows("SELECT pid, count(*) AS n FROM {schema}.executions GROUP BY pid")
    assert {row["pid"] for row in pids} <= {worker.pid for worker in workers}
    assert len(pids) >= 2, f"only one worker ran jobs: {pids}"
    print(f"\n2,000 noop jobs on 3 workers: {elapsed:.2f} s ({2000 / elapsed:.0f} jobs/s), {pids}")


# -- crash and stall --


def test_job_of_sigkilled_worker_is_rescued_and_runs_again(
    setup: Setup, spawn_worker: SpawnWorker
) -> None:
    workers = [spawn_worker(setup.dsn, setup.schema, "--concurrency=2") for _ in range(2)]
    job = setup.tasks.sleep.delay(3.0, retry_seconds=0.2)
    first = wait_started(setup.probe, job.id)
    victim = by_pid(workers, first["pid"])
    survivor = next(worker for worker in workers if worker is not victim)

    killed_at = time.monotonic()
    victim.send(signal.SIGKILL)
    assert victim.wait_exit(5) == -signal.SIGKILL
    second = wait_started(setup.probe, job.id, attempt=2, timeout=RESCUE_BOUND + 2)
    rescue_time = time.monotonic() - killed_at
    print(f"\nrescue after SIGKILL: {rescue_time:.2f} s (bound {RESCUE_BOUND:.2f} s)")
    assert rescue_time <= RESCUE_BOUND

    row = wait_status(setup.probe, job.id, "done")
    assert row["attempts"] == 2
    assert row["result"] == 0.2
    executions = setup.probe.executions(job.id)
    assert [(e["attempt"], e["pid"]) for e in executions] == [
        (1, victim.pid),
        (2, survivor.pid),
    ]
    assert executions[0]["finished"] is None  # the killed attempt never returned
    assert second["worker_id"] == survivor.worker_id() == row["locked_by"]
    survivor.wait_for_log(f"rescued job {job.id} (attempt 1)")


def test_stalled_worker_loses_its_lease_and_its_late_outcome_is_discarded(
    setup: Setup, spawn_worker: SpawnWorker
) -> None:
    workers = [spawn_worker(setup.dsn, setup.schema, "--concurrency=2") for _ in range(2)]
    job = setup.tasks.sleep.delay(1.5, retry_seconds=0.2)
    first = wait_started(setup.probe, job.id)
    stale = by_pid(workers, first["pid"])
    other = next(worker for worker in workers if worker is not stale)
    stale_id = stale.worker_id()

    stopped_at = time.monotonic()
    stale.send(signal.SIGSTOP)
    second = wait_started(setup.probe, job.id, attempt=2, timeout=RESCUE_BOUND + 2)
    rescue_time = time.monotonic() - stopped_at
    print(f"\nrescue after SIGSTOP: {rescue_time:.2f} s (bound {RESCUE_BOUND:.2f} s)")
    assert rescue_time <= RESCUE_BOUND
    assert second["pid"] == other.pid
    done = wait_status(setup.probe, job.id, "done")
    assert (done["attempts"], done["locked_by"], done["result"]) == (2, other.worker_id(), 0.2)

    stale.send(signal.SIGCONT)
    log = stale.wait_for_log(f"job {job.id} worker_app.sleep attempt 1: lease lost")
    stale.wait_for_log("re-registered")
    # The stale attempt's code did finish, but its outcome changed nothing.
    wait_until(
        lambda: setup.probe.executions(job.id)[0]["finished"] is not None,
        message="the stale attempt to return",
    )
    assert setup.probe.job(job.id) == done
    assert "discarded" in log

    # The stale worker registered again and keeps working once it is alone.
    other.send(signal.SIGTERM)
    assert other.wait_exit(10) == 0
    registrations = setup.probe.workers()
    # Exactly one new registration: the heartbeat and rescuer threads both notice the
    # removal after SIGCONT and must not both re-register (an orphan registration would
    # own the jobs claimed under it and get them rescued while they run).
    assert [row["pid"] for row in registrations] == [stale.pid], registrations
    assert registrations[0]["id"] != stale_id
    follow_up = setup.tasks.noop.delay()
    wait_status(setup.probe, follow_up.id, "done")
    assert [e["pid"] for e in setup.probe.executions(follow_up.id)] == [stale.pid]


# -- shutdown --


def test_sigterm_lets_a_running_job_finish_then_exits_cleanly(
    setup: Setup, spawn_worker: SpawnWorker
) -> None:
    worker = spawn_worker(setup.dsn, setup.schema, "--shutdown-timeout=10")
    job = setup.tasks.sleep.delay(1.0)
    wait_started(setup.probe, job.id)

    worker.send(signal.SIGTERM)
    assert worker.wait_exit(10) == 0
    row = setup.probe.job(job.id)
    assert (row["status"], row["attempts"], row["result"]) == ("done", 1, 1.0)
    assert setup.probe.executions(job.id)[0]["finished"] is not None
    assert setup.probe.workers() == []
    log = worker.log()
    assert "SIGTERM received" in log
    assert "released" not in log


def test_sigterm_releases_a_job_longer_than_the_shutdown_timeout(
    setup: Setup, spawn_worker: SpawnWorker
) -> None:
    worker = spawn_worker(setup.dsn, setup.schema, "--shutdown-timeout=1")
    job = setup.tasks.sleep.delay(30.0)
    wait_started(setup.probe, job.id)

    signalled_at = time.monotonic()
    worker.send(signal.SIGTERM)
    assert worker.wait_exit(1 + 5) == 0
    exit_time = time.monotonic() - signalled_at
    print(f"\nSIGTERM with a 30 s job and --shutdown-timeout=1: exited after {exit_time:.2f} s")
    row = setup.probe.job(job.id)
    assert (row["status"], row["attempts"]) == ("pending", 0)
    assert setup.probe.workers() == []
    assert f"released 1 running job(s) back to pending (attempt not used up): {job.id}" in (
        worker.log()
    )


def test_second_sigint_releases_running_jobs_at_once(
    setup: Setup, spawn_worker: SpawnWorker
) -> None:
    worker = spawn_worker(setup.dsn, setup.schema, "--shutdown-timeout=30")
    job = setup.tasks.sleep.delay(30.0)
    wait_started(setup.probe, job.id)

    worker.send(signal.SIGINT)
    worker.wait_for_log("SIGINT received")
    assert worker.process.poll() is None  # still waiting for the job
    signalled_at = time.monotonic()
    worker.send(signal.SIGINT)
    assert worker.wait_exit(5) == 0
    exit_time = time.monotonic() - signalled_at
    print(f"\nsecond SIGINT: exited after {exit_time:.2f} s")
    assert exit_time < 1.5
    row = setup.probe.job(job.id)
    assert (row["status"], row["attempts"]) == ("pending", 0)
    assert setup.probe.workers() == []
    assert "second SIGINT" in worker.log()


# -- database trouble --


@pytest.fixture
def private_server() -> Iterator[PrivateServer]:
    """A PostgreSQL for one test (it gets restarted)."""
    server = PrivateServer(prefix="pgtasks-restart-")
    yield server
    server.close()


def test_worker_survives_a_database_restart_without_losing_jobs(
    private_server: PrivateServer, prepare: Prepare, spawn_worker: SpawnWorker
) -> None:
    dsn = private_server.dsn
    with App(dsn, schema=new_schema_name(), connect_timeout=3) as app:
        app.migrate()
        setup = prepare(app, dsn)
        probe = setup.probe
        worker = spawn_worker(dsn, setup.schema, "--concurrency=2")
        handles = setup.tasks.sleep.delay_many([{"seconds": 0.02}] * 300)
        app.close()  # the pool would only log the restart
        wait_until(
            lambda: probe.status_counts().get("done", 0) >= 60, timeout=20, message="60 done"
        )

        restart_began = time.monotonic()
        private_server.restart()
        restarted = time.monotonic()

        def done_since_restart() -> int:
            try:
                rows = probe.rows(
                    "SELECT count(*) AS n FROM {schema}.all_jobs"
                    " WHERE status = 'done' AND finished_at > pg_postmaster_start_time()"
                )
            except psycopg.OperationalError:
                return 0  # the server is still coming back
            return int(rows[0]["n"])

        wait_until(done_since_restart, timeout=20, message="a job done after the restart")
        recovery = time.monotonic() - restarted
        print(
            f"\ndatabase restart: pg_ctl restart took {restarted - restart_began:.2f} s;"
            f" first job done {recovery:.2f} s after the server was back"
        )

        wait_until(
            lambda: probe.status_counts() == {"done": 300}, timeout=30, message="300 jobs done"
        )
        assert worker.process.poll() is None, "the worker must resume, not exit"
        per_job = probe.executions_per_job()
        assert set(per_job) == {handle.id for handle in handles}
        log = worker.log()
        assert "database error" in log
        assert "database reachable again" in log
        # At-least-once allows a second run only when a lease expired (a crash, an outage
        # longer than the lease). This outage is far shorter: a job that ran twice had its
        # finished attempt thrown away. (One row is one run: the recorder dedups retries.)
        duplicates = {
            job: [(row["attempt"], row["pid"]) for row in probe.executions(job)]
            for job, n in per_job.items()
            if n > 1
        }
        assert not duplicates, (
            duplicates,
            [line for line in log.splitlines() if "lease lost" in line or "released" in line],
        )
        worker.send(signal.SIGTERM)
        assert worker.wait_exit(10) == 0


def run_worker_once(dsn: str, schema: str, **environment: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        pgtasks_command("worker", "-A", APP_PATH, *TIMING_FLAGS),
        cwd=ROOT,
        env=pgtasks_env(dsn, schema, **environment),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


def test_worker_refuses_an_unmigrated_schema(dsn: str, make_app: Callable[..., App]) -> None:
    schema = make_app(migrate=False).schema  # dropped afterwards, never created
    result = run_worker_once(dsn, schema)

    assert result.returncode == 1, result.stderr
    errors = error_lines(result.stderr)
    assert len(errors) == 1, result.stderr
    assert "pgtasks migrate" in errors[0]
    assert result.stderr.rstrip().splitlines()[-1] == errors[0]  # nothing continues it
    assert schema in errors[0]
    assert "Traceback" not in result.stderr


def test_worker_reports_an_unreachable_database_without_the_password() -> None:
    nowhere = f"postgresql://pgtasks:{PASSWORD}@127.0.0.1:1/pgtasks"
    started = time.monotonic()
    result = run_worker_once(nowhere, "pgtasks", PGTASKS_TEST_CONNECT_TIMEOUT="1")
    elapsed = time.monotonic() - started

    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "S3cr3t" not in output
    assert "Traceback" not in output
    errors = error_lines(result.stderr)
    assert len(errors) == 1, output
    assert "127.0.0.1:1" in errors[0]
    assert result.stderr.rstrip().splitlines()[-1] == errors[0]  # one line, nothing after
    print(f"\nunreachable database reported in {elapsed:.2f} s: {errors[0]}")


# -- logs --


def with_password(dsn: str) -> tuple[str, str]:
    """The DSN with a password (trust auth ignores it) and the password to look for."""
    params = conninfo.conninfo_to_dict(dsn)
    existing = params.get("password") or os.environ.get("PGPASSWORD")
    if existing:
        return dsn, str(existing)
    return conninfo.make_conninfo(dsn, password=PASSWORD), PASSWORD


def test_banner_and_job_lines_name_what_operators_need(
    dsn: str, make_app: Callable[..., App], prepare: Prepare, spawn_worker: SpawnWorker
) -> None:
    secret_dsn, secret = with_password(dsn)
    setup = prepare(make_app(), dsn)
    worker = spawn_worker(secret_dsn, setup.schema, "--queues=default,other", "--concurrency=3")
    worker_id = worker.worker_id()
    assert [row["id"] for row in setup.probe.workers()] == [worker_id]

    banner = next(line for line in worker.log().splitlines() if " started: " in line)
    assert " INFO " in banner
    assert f"worker {worker_id} (" in banner
    assert f":{worker.pid})" in banner
    assert "queues=default,other" in banner
    assert "concurrency=3" in banner
    params = conninfo.conninfo_to_dict(dsn)
    assert f"/{params.get('dbname') or params.get('user')}" in banner
    assert str(params.get("host", "")).split(",")[0] in banner

    noop = setup.tasks.noop.delay()
    slow = setup.tasks.sleep.delay(0.05)
    for job_id, task in ((noop.id, "worker_app.noop"), (slow.id, "worker_app.sleep")):
        wait_status(setup.probe, job_id, "done")
        line = re.escape(f"INFO pgtasks.worker: job {job_id} {task} attempt 1/5 done in ")
        worker.wait_for_log(f"job {job_id} {task} attempt 1/5 done in ")
        assert re.search(line + r"\d+\.\d{3} s$", worker.log(), re.MULTILINE), worker.log()

    worker.send(signal.SIGTERM)
    assert worker.wait_exit(10) == 0
    assert secret not in worker.log()
