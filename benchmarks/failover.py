"""A primary failover under load (``--failover``), and what it costs.

    python -m benchmarks --failover [--rounds R] [--promote-after SECONDS] [--quick]

A PostgreSQL 15 primary and its streaming replica (scripts/ci-postgres15.sh: their own
data directories, 127.0.0.1 from port 54480), ``pgtasks worker`` and ``pgtasks beat``
processes and producer threads on the multi-host DSN ``host=127.0.0.1,127.0.0.1
port=P1,P2 target_session_attrs=read-write``. Under load the primary is stopped hard
(``pg_ctl stop -m immediate``) and the replica promoted (``pg_ctl promote``), as an HA
manager would. Measured per round: the outage (the last enqueue acknowledged before the
crash to the first after the promotion), the time the workers took to run jobs again
after the promotion, acknowledged enqueues lost (their job is not on the new primary),
and jobs run more than once. Asynchronous replication (the default) is measured, then
synchronous (``synchronous_standby_names = '*'``, ``synchronous_commit = on``), where no
acknowledged enqueue may be lost. tests/servers/test_failover.py runs the synchronous
case as a test.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo, sql

from benchmarks.clusters import Cluster, pg15_available
from benchmarks.failover_app import TICK_SCHEDULE, create_runs_table, register
from pgtasks import App

ROOT = Path(__file__).resolve().parent.parent
FIRST_PORT = 54480
APP_PATH = "benchmarks.failover_app:app"
SCHEMA = "pgtasks_failover"
#: Worker timings: heartbeats every second, a lease (10 s) longer than the failover, a
#: poll interval (20 s) so long that jobs enqueued after the failover are found through
#: LISTEN/NOTIFY again, or not for 20 s.
WORKER_FLAGS = (
    "--lease-timeout=10",
    "--heartbeat-interval=1",
    "--rescue-interval=1",
    "--poll-interval=20",
    "--concurrency=4",
)
BANNER = re.compile(r"worker (?P<id>\d+) \((?P<name>[^)]+)\) started")


class Pair:
    """A primary and its streaming replica; ``dsn`` names both (writes: the primary)."""

    def __init__(self, directory: Path, *, synchronous: bool, first_port: int = FIRST_PORT):
        self.directory = directory
        self.synchronous = synchronous
        self.primary = Cluster(directory / "primary.state", "127.0.0.1", first_port)
        self.replica: Cluster | None = None

    def start(self) -> Pair:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.primary.start()
        try:
            self.replica = self.primary.start_replica(self.directory / "replica.state")
            if self.synchronous:
                with psycopg.connect(self.primary.dsn, autocommit=True) as conn:
                    conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                    conn.execute("ALTER SYSTEM SET synchronous_commit = on")
                    conn.execute("SELECT pg_reload_conf()")
                    wait_for(
                        lambda: (
                            conn.execute("SELECT sync_state FROM pg_stat_replication").fetchall()
                            == [("sync",)]
                        ),
                        "the replica to be synchronous",
                    )
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def dsn(self) -> str:
        """``host=a,b port=p1,p2 … target_session_attrs=read-write``."""
        assert self.replica is not None
        first = conninfo.conninfo_to_dict(self.primary.dsn)
        second = conninfo.conninfo_to_dict(self.replica.dsn)
        return conninfo.make_conninfo(
            host=f"{first['host']},{second['host']}",
            port=f"{first['port']},{second['port']}",
            user=str(first["user"]),
            dbname=str(first["dbname"]),
            target_session_attrs="read-write",
        )

    @property
    def new_primary_dsn(self) -> str:
        assert self.replica is not None
        return self.replica.dsn

    def fail_over(
        self, promote_after: float = 0.0, replica_lag: float = 0.0
    ) -> tuple[float, float]:
        """Crash the primary, promote the replica ``promote_after`` seconds later (an HA
        manager's detection time): (crash, promoted) epoch seconds. ``replica_lag``: the
        replica's WAL receiver is stopped (SIGSTOP) that many seconds before the crash and
        killed after it (the WAL it had not written is lost, as over a link that died
        with the primary); the replica restarts its recovery before it is promoted."""
        assert self.replica is not None
        receiver = self.wal_receiver_pid() if replica_lag else None
        if receiver is not None:
            os.kill(receiver, signal.SIGSTOP)
            time.sleep(replica_lag)
        self.primary.crash()
        if receiver is not None:
            os.kill(receiver, signal.SIGKILL)
            wait_for(self.replica_answers, "the replica's recovery restarted", 60)
        crashed = time.time()
        time.sleep(promote_after)
        self.replica.promote()
        return crashed, time.time()

    def replica_answers(self) -> bool:
        assert self.replica is not None
        try:
            with psycopg.connect(self.replica.dsn, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
        except psycopg.OperationalError:
            return False
        return True

    def wal_receiver_pid(self) -> int:
        assert self.replica is not None
        with psycopg.connect(self.replica.dsn, autocommit=True) as conn:
            row = conn.execute("SELECT pid FROM pg_stat_wal_receiver").fetchone()
        assert row is not None, "the replica does not stream"
        return int(row[0])

    def stop(self) -> None:
        for cluster in (self.replica, self.primary):
            if cluster is not None:
                with contextlib.suppress(Exception):
                    cluster.stop()


def wait_for(condition: Any, what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


@dataclasses.dataclass
class Process:
    kind: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def worker_id(self) -> int:
        match = wait_for(lambda: BANNER.search(self.log()), f"{self.kind}'s banner")
        return int(match["id"])


class Processes:
    """``pgtasks worker`` / ``pgtasks beat`` processes on the failover app; killed at close."""

    def __init__(self, dsn: str, schema: str, log_dir: Path) -> None:
        self.env = {key: value for key, value in os.environ.items() if key != "PGTASKS_APP"}
        self.env.update(
            PGTASKS_DSN=dsn,
            PGTASKS_FAILOVER_SCHEMA=schema,
            PYTHONUNBUFFERED="1",
            PYTHONPATH=str(ROOT),
        )
        self.log_dir = log_dir
        self.children: list[Process] = []

    def spawn(self, kind: str, *arguments: str) -> Process:
        log_path = self.log_dir / f"{kind}-{len(self.children)}.log"
        command = [sys.executable, "-m", "pgtasks", kind, "-A", APP_PATH, *arguments]
        with log_path.open("wb") as log_file:
            popen = subprocess.Popen(
                command,
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        child = Process(kind, popen, log_path)
        self.children.append(child)
        return child

    def close(self) -> None:
        for child in self.children:
            if child.alive():
                child.popen.terminate()
                try:
                    child.popen.wait(10)
                except subprocess.TimeoutExpired:
                    child.popen.kill()
                    child.popen.wait(10)


class Producer(threading.Thread):
    """Enqueues ``failover.work`` jobs one by one on its own App until stopped; keeps the
    ids (and when) of the acknowledged ones. A failed enqueue is counted and not retried
    (its job may or may not exist: it was never acknowledged)."""

    def __init__(
        self, dsn: str, schema: str, seed: int, pause: float, durations: Sequence[float]
    ) -> None:
        super().__init__(daemon=True, name=f"producer-{seed}")
        self.pause = pause
        self.durations = list(durations)
        self.app = App(dsn, schema=schema, connect_timeout=2.0)
        self.work, _ = register(self.app)
        self.random = random.Random(seed)
        self.acknowledged: list[tuple[int, float]] = []
        self.failures = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        # One result read first: the App's result listener (LISTEN) runs from then on,
        # across the failover (wake_probe reads results through it afterwards).
        self.work.delay().get(timeout=30)
        while not self.stopping.is_set():
            try:
                handle = self.work.delay(seconds=self.random.choice(self.durations))
            except Exception:
                self.failures += 1
                self.stopping.wait(0.05)
                continue
            self.acknowledged.append((handle.id, time.time()))
            self.stopping.wait(self.pause)

    def acknowledged_since(self, moment: float) -> int:
        return sum(1 for _, at in self.acknowledged if at > moment)

    def stop(self, *, close: bool = True) -> None:
        self.stopping.set()
        if self.ident is not None:  # started
            self.join(30)
        if close:
            self.app.close()


@dataclasses.dataclass
class Outcome:
    """What one failover did (times in seconds)."""

    synchronous: bool
    acknowledged: int
    acknowledged_before_crash: int
    lost: int
    outage: float
    resumed_after_promotion: float
    workers_resumed: int
    workers: int
    duplicate_runs: int
    same_attempt_twice: int
    ticks: list[datetime]
    crashed: float
    promoted: float
    #: Enqueue to done of jobs enqueued one by one to idle workers after the failover.
    wake_ms: list[float]
    #: The producer's result listener (job.get()) LISTENs again after the failover.
    result_listener_healthy: bool
    #: Jobs enqueued before the crash whose run ended after it.
    in_flight: int
    #: Each worker's output.
    worker_logs: list[str] = dataclasses.field(default_factory=list, repr=False)

    def describe(self) -> str:
        mode = "synchronous" if self.synchronous else "asynchronous"
        return (
            f"{mode}: {self.acknowledged} enqueues acknowledged"
            f" ({self.acknowledged_before_crash} before the crash), {self.lost} lost;"
            f" outage {self.outage:.2f} s (last ack before the crash to first after the"
            f" promotion); workers running jobs again {self.resumed_after_promotion:.2f} s"
            f" after the promotion ({self.workers_resumed} of {self.workers});"
            f" {self.duplicate_runs} jobs run twice, {self.same_attempt_twice} attempts run"
            f" by two owners; beat: {len(self.ticks)} ticks, {tick_gaps(self.ticks)} gaps,"
            f" {len(self.ticks) - len(set(self.ticks))} doubled; {self.in_flight} jobs in"
            f" flight at the crash; enqueue to done on idle workers after the failover"
            f" {statistics.median(self.wake_ms):.0f} ms (median of {len(self.wake_ms)}); result"
            f" listener {'healthy' if self.result_listener_healthy else 'NOT healthy'}"
        )


def tick_gaps(ticks: Sequence[datetime]) -> int:
    return sum(
        1 for a, b in itertools.pairwise(sorted(set(ticks))) if b - a != timedelta(seconds=1)
    )


def prepare_schema(dsn: str, schema: str) -> None:
    with App(dsn, schema=schema) as app:
        app.migrate()
    with psycopg.connect(dsn, autocommit=True) as conn:
        create_runs_table(conn, schema)


def run_failover(
    pair: Pair,
    log_dir: Path,
    *,
    schema: str = SCHEMA,
    workers: int = 2,
    producers: int = 2,
    before: int = 60,
    after: int = 30,
    pause: float = 0.1,
    durations: Sequence[float] = (0.0, 0.0, 0.05, 1.0),
    promote_after: float = 0.0,
    replica_lag: float = 0.0,
    timeout: float = 60.0,
) -> Outcome:
    """Workers, beat and producers on ``pair.dsn`` (each producer waits ``pause`` seconds
    between enqueues, so that the workers keep up; its jobs sleep one of ``durations``);
    the failover once ``before`` enqueues were acknowledged (``promote_after``,
    ``replica_lag``: see Pair.fail_over); producers run until each acknowledged ``after``
    more past the promotion; then every acknowledged job that survived must end done on
    the new primary."""
    dsn = pair.dsn
    prepare_schema(dsn, schema)
    processes = Processes(dsn, schema, log_dir)
    started: list[Producer] = []
    try:
        children = [processes.spawn("worker", *WORKER_FLAGS) for _ in range(workers)]
        worker_ids = [child.worker_id() for child in children]
        beat = processes.spawn("beat")
        started = [Producer(dsn, schema, seed, pause, durations) for seed in range(producers)]
        for producer in started:
            producer.start()
        with psycopg.connect(pair.primary.dsn, autocommit=True) as conn:
            wait_for(
                lambda: (
                    sum(len(p.acknowledged) for p in started) >= before
                    and count(conn, schema, "runs") >= before // 3
                    and tick_count(conn, schema) >= 3
                ),
                "load on the primary",
                timeout,
            )
        crashed, promoted = pair.fail_over(promote_after, replica_lag)
        wait_for(
            lambda: all(p.acknowledged_since(promoted) >= after for p in started),
            "enqueues acknowledged by the new primary",
            timeout,
        )
        for producer in started:
            producer.stop(close=False)  # the first one's App serves wake_probe
        acknowledged = sorted(
            (job_id, at) for producer in started for job_id, at in producer.acknowledged
        )
        ids = [job_id for job_id, _ in acknowledged]
        with psycopg.connect(pair.new_primary_dsn, autocommit=True) as conn:
            existing = found_ids(conn, schema, ids)
            lost = len(set(ids) - existing)
            wait_for(
                lambda: done_count(conn, schema, list(existing)) == len(existing),
                "every acknowledged job that survived to be done",
                timeout,
            )
            wait_for(lambda: latest_tick(conn, schema) > promoted + 3, "beat ticking", timeout)
            runs = conn.execute(
                sql.SQL("SELECT job_id, attempt, worker_id, at FROM {}").format(
                    sql.Identifier(schema, "runs")
                )
            ).fetchall()
            ticks = tick_times(conn, schema)
            in_flight = in_flight_at(conn, schema, crashed)
        latencies = wake_probe(started[0].app, pair.new_primary_dsn)
        listener_healthy = started[0].app.result_listener().healthy
        per_job: dict[int, int] = {}
        per_attempt: dict[tuple[int, int], int] = {}
        resumed_at: dict[int, float] = {}
        for job_id, attempt, worker_id, at in runs:
            per_job[job_id] = per_job.get(job_id, 0) + 1
            per_attempt[(job_id, attempt)] = per_attempt.get((job_id, attempt), 0) + 1
            if at.timestamp() > promoted:
                resumed_at[worker_id] = min(
                    resumed_at.get(worker_id, at.timestamp()), at.timestamp()
                )
        before_crash = [at for _, at in acknowledged if at <= crashed]
        after_promotion = [at for _, at in acknowledged if at > promoted]
        for child in [*children, beat]:
            if not child.alive():
                raise AssertionError(f"a {child.kind} exited:\n{child.log()}")
        return Outcome(
            synchronous=pair.synchronous,
            acknowledged=len(ids),
            acknowledged_before_crash=len(before_crash),
            lost=lost,
            outage=min(after_promotion) - max(before_crash),
            resumed_after_promotion=max(resumed_at.values(), default=promoted) - promoted,
            workers_resumed=sum(1 for worker in worker_ids if worker in resumed_at),
            workers=len(worker_ids),
            duplicate_runs=sum(1 for n in per_job.values() if n > 1),
            same_attempt_twice=sum(1 for n in per_attempt.values() if n > 1),
            ticks=ticks,
            crashed=crashed,
            promoted=promoted,
            wake_ms=latencies,
            result_listener_healthy=listener_healthy,
            in_flight=in_flight,
            worker_logs=[child.log() for child in children],
        )
    finally:
        for producer in started:
            producer.stop()
        processes.close()
        for child in processes.children:
            if os.environ.get("PGTASKS_FAILOVER_LOGS"):
                print(f"--- {child.kind} {child.popen.pid} ---\n{child.log()}")


def count(conn: psycopg.Connection[Any], schema: str, table: str) -> int:
    row = conn.execute(
        sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, table))
    ).fetchone()
    return int(row[0]) if row else 0


def found_ids(conn: psycopg.Connection[Any], schema: str, ids: list[int]) -> set[int]:
    rows = conn.execute(
        sql.SQL("SELECT id FROM {} WHERE id = ANY(%s)").format(sql.Identifier(schema, "all_jobs")),
        (ids,),
    ).fetchall()
    return {row[0] for row in rows}


def done_count(conn: psycopg.Connection[Any], schema: str, ids: list[int]) -> int:
    row = conn.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE id = ANY(%s) AND status = 'done'").format(
            sql.Identifier(schema, "all_jobs")
        ),
        (ids,),
    ).fetchone()
    return int(row[0]) if row else 0


def tick_times(conn: psycopg.Connection[Any], schema: str) -> list[datetime]:
    rows = conn.execute(
        sql.SQL(
            "SELECT run_at FROM {} WHERE starts_with(idempotency_key, %s) ORDER BY run_at"
        ).format(sql.Identifier(schema, "all_jobs")),
        (f"pgtasks.periodic:{TICK_SCHEDULE}@",),
    ).fetchall()
    return [row[0] for row in rows]


def tick_count(conn: psycopg.Connection[Any], schema: str) -> int:
    return len(tick_times(conn, schema))


def latest_tick(conn: psycopg.Connection[Any], schema: str) -> float:
    ticks = tick_times(conn, schema)
    return ticks[-1].timestamp() if ticks else 0.0


def in_flight_at(conn: psycopg.Connection[Any], schema: str, crashed: float) -> int:
    row = conn.execute(
        sql.SQL(
            "SELECT count(DISTINCT runs.job_id) FROM {} AS runs JOIN {} AS jobs"
            " ON jobs.id = runs.job_id"
            " WHERE jobs.created_at < to_timestamp(%s) AND runs.at > to_timestamp(%s)"
        ).format(sql.Identifier(schema, "runs"), sql.Identifier(schema, "all_jobs")),
        (crashed, crashed),
    ).fetchone()
    return int(row[0]) if row else 0


#: Jobs of the wake probe, and how long each may take: well under the workers' poll
#: interval (20 s), so only a NOTIFY on a listener that LISTENs again after the failover
#: gets them run in time.
WAKE_PROBES = 5
WAKE_TIMEOUT = 8.0


def wake_probe(app: App, check_dsn: str) -> list[float]:
    """Milliseconds from enqueue to result (``job.get()``) of WAKE_PROBES jobs enqueued one
    at a time on idle workers, by a producer's App that was running before the failover
    (TimeoutError: one was not run within WAKE_TIMEOUT)."""
    latencies: list[float] = []
    work = app.tasks["failover.work"]
    with psycopg.connect(check_dsn, autocommit=True) as conn:
        wait_for(lambda: count_pending_or_running(conn, app.schema) == 0, "the workers idle")
        for _ in range(WAKE_PROBES):
            started = time.monotonic()
            handle = work.delay(seconds=0.0)
            try:
                handle.get(timeout=WAKE_TIMEOUT)
            except TimeoutError:
                raise TimeoutError(
                    f"job {handle.id} did not run within {WAKE_TIMEOUT:g} s: did the workers"
                    " LISTEN again after the failover?"
                ) from None
            latencies.append((time.monotonic() - started) * 1000)
    return latencies


def count_pending_or_running(conn: psycopg.Connection[Any], schema: str) -> int:
    row = conn.execute(
        sql.SQL(
            "SELECT count(*) FROM {} WHERE status IN ('pending', 'running') AND run_at <= now()"
        ).format(sql.Identifier(schema, "jobs")),
    ).fetchone()
    return int(row[0]) if row else 0


@contextlib.contextmanager
def pair_of(
    synchronous: bool, directory: Path | None = None, first_port: int = FIRST_PORT
) -> Iterator[Pair]:
    with tempfile.TemporaryDirectory(prefix="pgtasks-failover-") as scratch:
        where = directory or Path(scratch)
        pair = Pair(where, synchronous=synchronous, first_port=first_port).start()
        try:
            yield pair
        finally:
            pair.stop()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks --failover", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="failovers per mode and load")
    parser.add_argument(
        "--promote-after", type=float, default=0.0, help="seconds from the crash to promote"
    )
    parser.add_argument("--quick", action="store_true", help="one round per mode")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds = 1
    return args


#: The loads: the test's (two producers, 10 enqueues a second each, jobs of 0 to 1 s), a
#: flood (four producers enqueuing as fast as they can, no-op jobs), and the flood with a
#: replica one second behind: the loss window of asynchronous replication.
LOADS: dict[str, dict[str, Any]] = {
    "paced": {"producers": 2, "pause": 0.1, "durations": (0.0, 0.0, 0.05, 1.0)},
    "flood": {"producers": 4, "pause": 0.0, "durations": (0.0,), "before": 2000, "after": 300},
    # The flood with the replica 1 s behind at the crash (its WAL receiver stopped).
    "lagging": {
        "producers": 4,
        "pause": 0.0,
        "durations": (0.0,),
        "before": 2000,
        "after": 300,
        "replica_lag": 1.0,
    },
}


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if not pg15_available():
        print("failover: Debian's PostgreSQL 15 is not installed; skipped")
        return 0
    outcomes: dict[tuple[str, bool], list[Outcome]] = {}
    for _ in range(args.rounds):
        for load, options in LOADS.items():
            for synchronous in (False, True):  # alternating
                with pair_of(synchronous) as pair, tempfile.TemporaryDirectory() as logs:
                    outcome = run_failover(
                        pair, Path(logs), promote_after=args.promote_after, **options
                    )
                print(f"{load}, {outcome.describe()}", flush=True)
                outcomes.setdefault((load, synchronous), []).append(outcome)
    print(
        f"\nsummary ({args.rounds} rounds each; promoted {args.promote_after:g} s after the crash)"
    )
    for (load, synchronous), chosen in outcomes.items():
        mode = "synchronous" if synchronous else "asynchronous"
        print(
            f"{load:5} {mode:12}: acknowledged enqueues lost {[o.lost for o in chosen]}"
            f" of {[o.acknowledged_before_crash for o in chosen]} acknowledged before the"
            f" crash; outage median {statistics.median(o.outage for o in chosen):.2f} s;"
            f" workers running jobs again median"
            f" {statistics.median(o.resumed_after_promotion for o in chosen):.2f} s after the"
            f" promotion; jobs run twice {[o.duplicate_runs for o in chosen]}; beat ticks"
            f" skipped {[tick_gaps(o.ticks) for o in chosen]}, doubled"
            f" {[len(o.ticks) - len(set(o.ticks)) for o in chosen]}"
        )
    return 0
