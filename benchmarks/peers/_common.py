"""What both peer benchmarks share: their database, the execution log, the worker process.

Every execution of a peer's no-op task is logged in ``bench_executions`` (one row per
execution, keyed by the library's job id, with the task's start and finish times), so a job
run twice or never shows up as a duplicate or a loss instead of disappearing in a counter.
The task itself only appends to an in-memory buffer (see `Recorder`): a database round trip
per job from inside the task would add a commit per job to the peer's own work, and the
pgtasks figures beside it carry no such cost. The buffer is copied to the table every
50 ms by a thread and on shutdown, so a row can only be missing if the worker died.

Timestamps come from the worker's clock (``time.time()`` at task start and end) and the
producer's clock for enqueue times: the same machine, the same clock, for both peers.
Throughput is executed jobs / (last finish - first start), so process start-up and the
library's connection set-up are excluded, as in the pgtasks runner.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parent.parent.parent
EXECUTIONS = "bench_executions"
FLUSH_INTERVAL = 0.05
STALL_TIMEOUT = 60.0  # no new execution for this long: stop waiting, report the rest as lost
DRAIN_DEADLINE = 600.0


class Drain(NamedTuple):
    """One processing run: throughput and what went wrong (0, 0 when all went right)."""

    rate: float  # distinct jobs executed / (last finish - first start), jobs/s
    duplicates: int  # executions beyond the first, summed over jobs
    lost: int  # jobs enqueued and never executed


# -- the peer's own database -----------------------------------------------------------------------
def peer_dsn(dsn: str, database: str) -> str:
    """The benchmark server's DSN, pointing at ``database`` instead."""
    return make_conninfo(dsn, dbname=database)


def reset_database(dsn: str, database: str) -> str:
    """Drop and recreate the peer's database (with the execution log in it); return its DSN.

    Its name is ``database`` followed by the benchmark database's own name: two runs
    against two databases of one server (the test suite's benchmark tests run side by
    side) never drop each other's peer database."""
    source = conninfo_to_dict(dsn).get("dbname") or "postgres"
    database = f"{database}_{source}"[:63]
    name = sql.Identifier(database)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(name))
    target = peer_dsn(dsn, database)
    with psycopg.connect(target, autocommit=True) as conn:
        # UNLOGGED: the measuring instrument writes no WAL and costs the peer no fsync.
        conn.execute(
            sql.SQL(
                "CREATE UNLOGGED TABLE {} (job_key text NOT NULL, started_at timestamptz NOT NULL,"
                " finished_at timestamptz NOT NULL, pid integer NOT NULL)"
            ).format(sql.Identifier(EXECUTIONS))
        )
    return target


def asyncpg_arguments(dsn: str) -> dict[str, Any]:
    """``asyncpg.connect`` keyword arguments for a libpq DSN (URL or key=value)."""
    params = conninfo_to_dict(dsn)
    arguments: dict[str, Any] = {}
    for key, target in (("host", "host"), ("user", "user"), ("password", "password")):
        if params.get(key):
            arguments[target] = params[key]
    if params.get("port"):
        arguments["port"] = int(str(params["port"]))
    if params.get("dbname"):
        arguments["database"] = params["dbname"]
    if params.get("sslmode"):
        arguments["ssl"] = params["sslmode"]
    return arguments


# -- the worker side: log every execution ----------------------------------------------------------
class Recorder:
    """Buffers (job key, start, finish) in memory; a thread copies them to the table."""

    def __init__(self, dsn: str) -> None:
        self._rows: list[tuple[str, float, float]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._conn = psycopg.connect(dsn, autocommit=True)
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name="bench-recorder", daemon=True)
        self._thread.start()

    def record(self, job_key: str, started: float, finished: float) -> None:
        with self._lock:
            self._rows.append((job_key, started, finished))

    def _flush(self) -> None:
        with self._lock:
            rows, self._rows = self._rows, []
        if not rows:
            return
        utc = timezone.utc
        query = sql.SQL("COPY {} (job_key, started_at, finished_at, pid) FROM STDIN").format(
            sql.Identifier(EXECUTIONS)
        )
        with self._conn.cursor() as cursor, cursor.copy(query) as copy:
            for key, started, finished in rows:
                copy.write_row(
                    (
                        key,
                        datetime.fromtimestamp(started, utc),
                        datetime.fromtimestamp(finished, utc),
                        self._pid,
                    )
                )

    def _run(self) -> None:
        while not self._stop.wait(FLUSH_INTERVAL):
            self._flush()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._flush()
        self._conn.close()


# -- the runner side -------------------------------------------------------------------------------
@contextmanager
def worker_process(module: str, dsn: str, *arguments: str) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``python -m module --dsn DSN ARGS``; SIGTERM it (a clean stop) on the way out."""
    process = subprocess.Popen(
        [sys.executable, "-m", module, "--dsn", dsn, *arguments], cwd=ROOT, env=os.environ.copy()
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            print(f"  !! {module} did not stop within 30 s of SIGTERM: killed", file=sys.stderr)
        else:
            if code not in (0, -signal.SIGTERM):
                print(f"  !! {module} exited with status {code}", file=sys.stderr)


def executed(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(EXECUTIONS))
    ).fetchone()
    assert row is not None
    return int(row[0])


def execution_counts(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute(
        sql.SQL("SELECT job_key, count(*) FROM {} GROUP BY job_key").format(
            sql.Identifier(EXECUTIONS)
        )
    ).fetchall()
    return {str(key): int(count) for key, count in rows}


def wait_for_keys(
    conn: psycopg.Connection[Any],
    keys: set[str],
    process: subprocess.Popen[bytes],
    *,
    deadline: float = DRAIN_DEADLINE,
    stall: float = STALL_TIMEOUT,
) -> None:
    """Wait until every key has run, the worker exits, or nothing new runs for ``stall`` s."""
    give_up = time.monotonic() + deadline
    last_count, last_change = -1, time.monotonic()
    while process.poll() is None:
        count = executed(conn)
        if count >= len(keys) and keys <= execution_counts(conn).keys():
            return
        now = time.monotonic()
        if count != last_count:
            last_count, last_change = count, now
        elif now - last_change > stall:
            print(f"  !! no execution for {stall:.0f} s: stopping the worker", file=sys.stderr)
            return
        if now > give_up:
            print(f"  !! not drained after {deadline:.0f} s: stopping the worker", file=sys.stderr)
            return
        time.sleep(0.05)
    print(f"  !! worker exited early with status {process.returncode}", file=sys.stderr)


def drain_result(dsn: str, keys: set[str]) -> Drain:
    """Read the execution log after the worker stopped."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        counts = execution_counts(conn)
        row = conn.execute(
            sql.SQL("SELECT extract(epoch FROM max(finished_at) - min(started_at)) FROM {}").format(
                sql.Identifier(EXECUTIONS)
            )
        ).fetchone()
    duplicates = sum(count - 1 for count in counts.values() if count > 1)
    done = len(keys & counts.keys())
    strangers = len(counts.keys() - keys)
    if duplicates or strangers or done < len(keys):
        print(
            f"  !! {duplicates} duplicate execution(s), {len(keys) - done} lost job(s),"
            f" {strangers} unknown job(s)",
            file=sys.stderr,
        )
    seconds = float(row[0]) if row and row[0] is not None else 0.0
    return Drain(done / seconds if seconds > 0 else 0.0, duplicates, len(keys) - done)


def percentiles(values: list[float]) -> tuple[float, float, float]:
    """p50, p95, p99 by nearest rank, as the pgtasks runner computes them."""
    ordered = sorted(values)

    def percentile(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]

    return percentile(50), percentile(95), percentile(99)


def latency_result(dsn: str, enqueued: dict[str, float]) -> tuple[float, float, float]:
    """Enqueue -> task start, in ms, for the jobs in ``enqueued`` (key -> enqueue time)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT job_key, extract(epoch FROM min(started_at)) FROM {} GROUP BY job_key"
            ).format(sql.Identifier(EXECUTIONS))
        ).fetchall()
    started = {str(key): float(epoch) for key, epoch in rows}
    missing = enqueued.keys() - started.keys()
    if missing:
        print(f"  !! {len(missing)} latency job(s) never ran", file=sys.stderr)
    latencies = [(started[key] - at) * 1000 for key, at in enqueued.items() if key in started]
    if not latencies:
        raise RuntimeError("no latency job ran")
    return percentiles(latencies)


def wait_until_idle(
    conn: psycopg.Connection[Any], key: str, process: subprocess.Popen[bytes], timeout: float = 60
) -> None:
    """Wait for the warm-up job ``key`` to run (the worker is up), then let it settle."""
    deadline = time.monotonic() + timeout
    while key not in execution_counts(conn):
        if process.poll() is not None:
            raise RuntimeError(f"worker exited with status {process.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError("worker did not start")
        time.sleep(0.05)
    time.sleep(0.5)
