"""The fault-injection harness: real processes, real faults, invariants checked in SQL.

- :class:`Processes` starts ``pgtasks worker`` / ``pgtasks beat`` subprocesses on
  ``tests.faults.fault_app:app`` with intervals shrunk by CLI flags (:data:`TIMING_FLAGS`);
  every process still running at teardown is killed and its log printed.
- Faults: ``os.kill`` through :meth:`ChildProcess.send`, :func:`terminate_backends`
  (``pg_terminate_backend``), :class:`PrivateServer` (a PostgreSQL of one test that may be
  restarted, made read-only, or put behind :class:`tests.faults.proxy.Proxy` on TCP).
- :func:`assert_invariants` ends every scenario.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pgtasks import App
from pgtasks._embedded import embedded_dsn
from tests.acceptance.test_worker_processes import Probe, pg_ctl
from tests.apps.worker_app import create_executions_table
from tests.conftest import ROOT
from tests.faults.fault_app import FaultTasks, register_fault_tasks
from tests.helpers import wait_until

APP_PATH = "tests.faults.fault_app:app"
LEASE_TIMEOUT = 2.0
HEARTBEAT_INTERVAL = 0.3
RESCUE_INTERVAL = 0.3
POLL_INTERVAL = 0.2
TIMING_FLAGS = (
    f"--lease-timeout={LEASE_TIMEOUT}",
    f"--heartbeat-interval={HEARTBEAT_INTERVAL}",
    f"--rescue-interval={RESCUE_INTERVAL}",
    f"--poll-interval={POLL_INTERVAL}",
)
#: A dead worker's job runs again within: its last heartbeat ages past the lease, the next
#: rescue pass (interval + 10% jitter) returns it to pending, a worker claims it (1 s slack).
RESCUE_BOUND = LEASE_TIMEOUT + RESCUE_INTERVAL * 1.1 + 1.0
BANNER = re.compile(r"worker (?P<id>\d+) \((?P<name>[^)]+)\) started: ")


def environment(dsn: str, schema: str, **extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PGTASKS_APP", "DATABASE_URL", "PGTASKS_SCHEMA")
    }
    env.update(PGTASKS_DSN=dsn, PGTASKS_TEST_SCHEMA=schema, PYTHONUNBUFFERED="1", **extra)
    return env


@dataclasses.dataclass
class ChildProcess:
    """A ``pgtasks worker`` or ``pgtasks beat`` subprocess; its output goes to ``log_path``."""

    kind: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_for_log(self, text: str, timeout: float = 10.0) -> str:
        def seen() -> str | None:
            log = self.log()
            if text in log:
                return log
            if self.process.poll() is not None:
                raise AssertionError(
                    f"{self.kind} {self.pid} exited ({self.process.returncode}) before"
                    f" logging {text!r}:\n{log}"
                )
            return None

        found: str = wait_until(seen, timeout=timeout, message=f"{text!r} in {self.kind} log")
        return found

    def worker_id(self) -> int:
        match = BANNER.search(self.wait_for_log(" started: ", timeout=15))
        assert match is not None
        return int(match["id"])

    def send(self, signum: signal.Signals) -> None:
        os.kill(self.pid, signum)

    def wait_exit(self, timeout: float) -> int:
        return self.process.wait(timeout)


class Processes:
    """Starts worker and beat subprocesses; kills whatever still runs at :meth:`close`."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.children: list[ChildProcess] = []

    def _spawn(self, kind: str, command: list[str], env: dict[str, str]) -> ChildProcess:
        log_path = self.log_dir / f"{kind}-{len(self.children)}.log"
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        child = ChildProcess(kind, process, log_path)
        self.children.append(child)
        return child

    def worker(
        self,
        dsn: str,
        schema: str,
        *arguments: str,
        wait_started: bool = True,
        timing: Sequence[str] = TIMING_FLAGS,
        app_path: str = APP_PATH,
        **env: str,
    ) -> ChildProcess:
        command = [sys.executable, "-m", "pgtasks", "worker", "-A", app_path, *timing]
        child = self._spawn("worker", [*command, *arguments], environment(dsn, schema, **env))
        if wait_started:
            child.wait_for_log(" started: ", timeout=15.0)
        return child

    def beat(self, dsn: str, schema: str, *arguments: str, **env: str) -> ChildProcess:
        command = [sys.executable, "-m", "pgtasks", "beat", "-A", APP_PATH, *arguments]
        return self._spawn("beat", command, environment(dsn, schema, **env))

    def close(self) -> None:
        for child in self.children:
            if child.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.send(signal.SIGCONT)
                    child.process.kill()
                child.process.wait(10)
            # Shown by pytest only when the test failed.
            print(f"--- {child.kind} {child.pid} (exit {child.process.returncode}) ---")
            print(child.log())
        self.children = []


@dataclasses.dataclass
class FaultEnv:
    """A migrated schema with the executions table: the test's App, tasks and probe."""

    dsn: str
    app: App
    tasks: FaultTasks
    probe: Probe
    processes: Processes

    @property
    def schema(self) -> str:
        return self.app.schema

    def worker(self, *arguments: str, dsn: str | None = None, **options: Any) -> ChildProcess:
        return self.processes.worker(dsn or self.dsn, self.schema, *arguments, **options)

    def beat(self, *arguments: str, dsn: str | None = None, **env: str) -> ChildProcess:
        return self.processes.beat(dsn or self.dsn, self.schema, *arguments, **env)


def prepare_env(dsn: str, app: App, processes: Processes) -> FaultEnv:
    """Migrate ``app``'s schema (if needed) and add the executions side table."""
    app.migrate()
    with psycopg.connect(dsn, autocommit=True) as conn:
        create_executions_table(conn, app.schema)
    return FaultEnv(dsn, app, register_fault_tasks(app), Probe(dsn, app.schema), processes)


# -- waiting -----------------------------------------------------------------------------


def wait_started(
    probe: Probe, job_id: int, attempt: int = 1, timeout: float = 10.0
) -> dict[str, Any]:
    """Wait for the execution row of ``attempt`` of the job (its task code is running)."""

    def started() -> dict[str, Any] | None:
        return next((row for row in probe.executions(job_id) if row["attempt"] == attempt), None)

    row: dict[str, Any] = wait_until(
        started, timeout=timeout, message=f"job {job_id} attempt {attempt} to start"
    )
    return row


def wait_status(probe: Probe, job_id: int, status: str, timeout: float = 10.0) -> dict[str, Any]:
    row: dict[str, Any] = wait_until(
        lambda: (job := probe.job(job_id))["status"] == status and job,
        timeout=timeout,
        message=f"job {job_id} to be {status}",
    )
    return row


def safe_counts(probe: Probe) -> dict[str, int]:
    """Status counts, or {} while the database is unreachable."""
    try:
        return probe.status_counts()
    except psycopg.OperationalError:
        return {}


def wait_all_finished(probe: Probe, total: int, timeout: float = 60.0) -> None:
    def finished() -> bool:
        counts = safe_counts(probe)
        ended = sum(counts.get(status, 0) for status in ("done", "failed", "cancelled"))
        return ended == total and sum(counts.values()) == total

    wait_until(finished, timeout=timeout, interval=0.05, message=f"{total} jobs finished")


# -- faults ------------------------------------------------------------------------------


def terminate_backends(dsn: str, application_name_like: str, query_like: str = "%") -> int:
    """pg_terminate_backend every session whose application_name and query match."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name LIKE %s AND query LIKE %s AND pid <> pg_backend_pid()",
            (application_name_like, query_like),
        ).fetchall()
    return len(rows)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrivateServer:
    """An embedded PostgreSQL of one test: restartable, and on TCP 127.0.0.1 with ``tcp``.

    Not under pytest's tmp_path: as root the server runs as another user that must
    traverse the path (see tests/acceptance/test_worker_processes.py::private_server).
    """

    def __init__(self, *, tcp: bool) -> None:
        self.data_dir = Path(tempfile.mkdtemp(prefix="pgtasks-faults-"))
        self.pgdata = self.data_dir / "pgdata"
        self.dsn = embedded_dsn(self.data_dir)
        self.port: int | None = None
        if tcp:
            socket_dir = self.dsn.rsplit("host=", 1)[1]
            self.port = free_port()
            # Restarted with these options (kept in postmaster.opts for later restarts).
            self.pg_ctl(
                "-w",
                "-o",
                f"-h 127.0.0.1 -p {self.port} -k {socket_dir}",
                "-l",
                str(self.pgdata / "fault-server.log"),
                "restart",
                "-m",
                "fast",
            )
            self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def pg_ctl(self, *arguments: str) -> None:
        pg_ctl(list(arguments), self.pgdata)

    def restart(self) -> None:
        self.pg_ctl("-w", "restart", "-m", "fast")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.pg_ctl("-w", "stop", "-m", "immediate")
        shutil.rmtree(self.data_dir, ignore_errors=True)


# -- invariants --------------------------------------------------------------------------


def assert_invariants(
    probe: Probe,
    job_ids: Collection[int],
    *,
    failed: Collection[int] = (),
    cancelled: Collection[int] = (),
    released: bool = False,
    executed: bool = True,
) -> None:
    """The checks every scenario ends with (in SQL, on the jobs and executions tables).

    - no job is left running;
    - nothing is lost: every job in ``job_ids`` exists and is done, except those
      ``failed`` or ``cancelled`` by design;
    - attempts never exceed max_attempts;
    - executions per job never exceed its attempts (with ``released``, jobs released at a
      shutdown deadline got their attempt back: then distinct attempt numbers are
      counted instead);
    - each done job was completed by the lease that ran last: its final (locked_by,
      attempts) is the (worker, attempt) of its latest execution, which finished.
    """
    rows = probe.rows(
        "SELECT jobs.id, jobs.status, jobs.attempts, jobs.max_attempts, jobs.locked_by,"
        " count(executions.id) AS runs,"
        " count(DISTINCT executions.attempt) AS distinct_attempts,"
        " (array_agg(executions.attempt ORDER BY executions.attempt DESC,"
        "            executions.id DESC))[1] AS last_attempt,"
        " (array_agg(executions.worker_id ORDER BY executions.attempt DESC,"
        "            executions.id DESC))[1] AS last_worker,"
        " (array_agg(executions.finished IS NOT NULL ORDER BY executions.attempt DESC,"
        "            executions.id DESC))[1] AS last_finished"
        " FROM {schema}.jobs AS jobs"
        " LEFT JOIN {schema}.executions AS executions ON executions.job_id = jobs.id"
        " GROUP BY jobs.id"
    )
    by_id = {row["id"]: row for row in rows}
    running = [row["id"] for row in rows if row["status"] == "running"]
    assert not running, f"jobs left running: {running}"
    missing = set(job_ids) - set(by_id)
    assert not missing, f"jobs lost: {sorted(missing)}"
    problems: list[str] = []
    for job_id in job_ids:
        row = by_id[job_id]
        expected = "failed" if job_id in failed else "cancelled" if job_id in cancelled else "done"
        if row["status"] != expected:
            problems.append(f"job {job_id} is {row['status']}, expected {expected}")
        if row["attempts"] > row["max_attempts"]:
            problems.append(f"job {job_id}: attempts {row['attempts']} > max {row['max_attempts']}")
        runs = row["distinct_attempts"] if released else row["runs"]
        if runs > row["attempts"]:
            problems.append(f"job {job_id}: {row['runs']} executions > {row['attempts']} attempts")
        if row["status"] == "done" and executed:
            lease = (row["attempts"], row["locked_by"], True)
            last = (row["last_attempt"], row["last_worker"], row["last_finished"])
            if lease != last:
                problems.append(f"job {job_id}: done by lease {lease}, last execution {last}")
    assert not problems, "\n".join(problems[:20]) + f"\n({len(problems)} problems)"


def set_read_only(dsn: str, database: str, read_only: bool) -> None:
    """Make ``database`` read-only for new sessions and end the current ones (or undo it)."""
    with psycopg.connect(
        dsn, autocommit=True, options="-c default_transaction_read_only=off"
    ) as conn:
        value = sql.Literal("on" if read_only else "off")
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = {}").format(
                sql.Identifier(database), value
            )
        )
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
            (database,),
        )


def sleep_past(seconds: float) -> None:
    """Let wall time pass while a fault lasts (used only by faults, never to sync)."""
    deadline = time.monotonic() + seconds
    wait_until(lambda: time.monotonic() >= deadline, timeout=seconds + 5, interval=0.05)
