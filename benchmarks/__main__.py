"""Run the pgtasks benchmarks and print a table (and JSON).

    python -m benchmarks [--dsn DSN] [--jobs N] [--runs R] [--quick] [--json PATH] [--no-peers]
    python -m benchmarks --bloat [--quick] [...]   (bloat resilience: benchmarks/bloat.py)
    python -m benchmarks --in-process [...]   (the worker in an asyncio program: inprocess.py)
    python -m benchmarks --limits [...]   (claims with and without limits: limits.py)
    python -m benchmarks --workflow-races [...]   (stuck and doubled chord callbacks:
                                                   workflow_races.py)
    python -m benchmarks --enqueue [...]   (enqueue beside bare psycopg loops: enqueue.py)
    python -m benchmarks --insert-costs [...]   (what each trigger and index of jobs costs
                                                 an insert: insert_costs.py)
    python -m benchmarks --counters [...]   (the counters' cost, with and without: counters.py)
    python -m benchmarks --migrations [...]   (stalls while migrating a live table: migrations.py)
    python -m benchmarks --scaleout [...]   (1, 2, 3 stores on CPU-capped servers: scaleout.py)
    python -m benchmarks --failover [...]   (a replica promoted under load: failover.py)
    python -m benchmarks --big-group [...]   (a group of 1,000,000 members: big_group.py)
    python -m benchmarks --limit-changes [...]   (a limit changed at runtime reaching the
                                                  workers: limit_changes.py)
    python -m benchmarks --flow [...]   (debounce, expires, batches against plain: flow.py)

Each figure is the median of R runs (min and max shown). Processing runs a real
`pgtasks worker` process over N pre-enqueued no-op jobs and computes throughput from
the database's own timestamps (first claim to last finish), so process start-up is not
counted. Every execution is checked: a run with a job not done exactly once is reported.
The raw-SQL baseline runs the same claim and finish statements in a plain psycopg loop,
so the framework's overhead shows as a ratio. With the ``bench`` extra installed
(``pip install 'pgtasks[bench]'``), PgQueuer and Procrastinate run beside pgtasks on the
same server, each in its own database (see benchmarks/peers/), and a side-by-side table
closes the run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.figures import Figure, repeat
from benchmarks.side_by_side import add_integrity_figures, run_peers, side_by_side
from pgtasks._leases import ClaimPosition, ClaimRequest, Finish
from pgtasks._retry import Outcome
from pgtasks._worker.connection import WORKER_CONNECTION_OPTIONS

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = "pgtasks_bench"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per processing run")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run (smoke test)")
    parser.add_argument(
        "--peers",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also run PgQueuer and Procrastinate (default: when the bench extra is installed)",
    )
    parser.add_argument(
        "--json", default=str(ROOT / "benchmarks" / "results" / "latest.json"), help="output"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.runs = 200, 1
    return args


def resolve_dsn(explicit: str | None) -> str:
    if explicit:
        return explicit
    from pgtasks._embedded import embedded_dsn

    return embedded_dsn(ROOT / ".pgtasks-bench")


def reset_schema(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    os.environ["PGTASKS_SCHEMA"] = SCHEMA
    os.environ["PGTASKS_DSN"] = dsn
    from benchmarks.app import app

    app.close()
    app.database.schema_checked = False
    app.migrate()


def server_facts(dsn: str) -> dict[str, str]:
    names = ("server_version", "fsync", "synchronous_commit", "shared_buffers", "max_connections")
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {name: str(conn.execute(f"SHOW {name}").fetchone()[0]) for name in names}  # type: ignore[index]


def print_setting(dsn: str) -> dict[str, str]:
    """Print the machine and the server's settings (every run starts so); return the latter."""
    facts = server_facts(dsn)
    print(
        f"machine: {os.cpu_count()} cores, {platform.platform()},"
        f" Python {platform.python_version()}"
    )
    print("postgres: " + ", ".join(f"{k}={v}" for k, v in facts.items()))
    return facts


# -- enqueue -------------------------------------------------------------------------------------
def enqueue_one_by_one(dsn: str, count: int) -> float:
    reset_schema(dsn)
    from benchmarks.app import noop

    started = time.perf_counter()
    for _ in range(count):
        noop.delay()
    return count / (time.perf_counter() - started)


def enqueue_bulk(dsn: str, count: int) -> float:
    reset_schema(dsn)
    from benchmarks.app import noop

    batches = max(1, count // 1000)
    started = time.perf_counter()
    for _ in range(batches):
        noop.delay_many([{}] * 1000)
    return batches * 1000 / (time.perf_counter() - started)


def enqueue_transactional(dsn: str, count: int) -> float:
    reset_schema(dsn)
    from benchmarks.app import noop

    transactions = max(1, count // 100)
    with psycopg.connect(dsn) as conn:
        started = time.perf_counter()
        for _ in range(transactions):
            with conn.transaction():
                for _ in range(100):
                    noop.apply_async(connection=conn)
        elapsed = time.perf_counter() - started
    return transactions * 100 / elapsed


# -- processing ----------------------------------------------------------------------------------
@contextmanager
def worker_processes(count: int, *arguments: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pgtasks",
                "worker",
                "-A",
                "benchmarks.app:app",
                "--log-level",
                "WARNING",
                *arguments,
            ],
            cwd=ROOT,
            env=os.environ.copy(),
        )
        for _ in range(count)
    ]
    try:
        yield processes
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def job_counts(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    row = conn.execute(
        sql.SQL("SELECT count(*) FILTER (WHERE status = 'done'), count(*) FROM {}.all_jobs").format(
            sql.Identifier(SCHEMA)
        )
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def processing(
    dsn: str,
    jobs: int,
    concurrency: int,
    *,
    task: str = "noop",
    workers: int = 1,
    worker_flags: tuple[str, ...] = (),
) -> float:
    reset_schema(dsn)
    from benchmarks import app as bench

    target = bench.anoop if task == "anoop" else bench.noop
    for start in range(0, jobs, 5000):
        target.delay_many([{}] * min(5000, jobs - start))
    deadline = time.monotonic() + 600
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        worker_processes(workers, "--concurrency", str(concurrency), *worker_flags),
    ):
        while job_counts(conn)[0] < jobs:
            if time.monotonic() > deadline:
                raise RuntimeError("processing did not finish in 600 s")
            time.sleep(0.05)
        PGTASKS_CHECKS.append(pgtasks_integrity(conn, jobs))
        row = conn.execute(
            sql.SQL(
                "SELECT extract(epoch FROM max(finished_at) - min(locked_at)),"
                " count(*) FILTER (WHERE attempts <> 1) FROM {}.all_jobs"
            ).format(sql.Identifier(SCHEMA))
        ).fetchone()
    assert row is not None
    seconds, not_once = float(row[0]), int(row[1])
    if not_once:
        print(f"  !! {not_once} job(s) ran more than once", file=sys.stderr)
    return jobs / seconds


def raw_sql_ceiling(dsn: str, jobs: int, batch: int) -> float:
    """The worker's own claim and finish statements in a bare loop (no tasks, no threads)."""
    reset_schema(dsn)
    from benchmarks.app import app, noop

    for start in range(0, jobs, 5000):
        noop.delay_many([{}] * min(5000, jobs - start))
    store = app.queries
    with psycopg.connect(
        dsn,
        autocommit=True,
        # The worker's connection settings (pgtasks._worker.connection.connector).
        options=WORKER_CONNECTION_OPTIONS,
    ) as conn:
        worker_id = store.register_worker(
            conn, hostname="bench", pid=0, queues=None, concurrency=batch
        )
        done = 0
        finished: list[Finish] = []
        # Like the worker: read on from the last claim's position, from the start once a
        # second (see worker/claims.py ClaimCursor).
        position: ClaimPosition | None = None
        next_full = 0.0
        started = time.perf_counter()
        done_outcome = Outcome.done("null")
        while True:
            if time.monotonic() >= next_full:
                position, next_full = None, time.monotonic() + 1.0
            claim = ClaimRequest(worker_id, batch, after=position)
            jobs = store.finish_and_claim_jobs(conn, finished, claim).claimed
            done += len(finished)
            if not jobs:
                break
            position = jobs[-1].position
            finished = [Finish.of(job, done_outcome) for job in jobs]
        elapsed = time.perf_counter() - started
    return done / elapsed


# -- latency ---------------------------------------------------------------------------------------
def idle_latency(
    dsn: str, count: int, gap: float, *worker_flags: str
) -> tuple[float, float, float]:
    reset_schema(dsn)
    from benchmarks.app import pickup

    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        worker_processes(1, "--concurrency", "10", *worker_flags),
    ):
        # Wait until the worker is registered and idle.
        deadline = time.monotonic() + 30
        while not conn.execute(
            sql.SQL("SELECT count(*) FROM {}.workers").format(sql.Identifier(SCHEMA))
        ).fetchone()[0]:  # type: ignore[index]
            if time.monotonic() > deadline:
                raise RuntimeError("worker did not start")
            time.sleep(0.05)
        time.sleep(0.5)
        for _ in range(count):
            # Measured like the peers: the producer's clock just before the enqueue call to
            # the start of the task body (one machine, one clock).
            pickup.delay(time.time())
            time.sleep(gap)
        while job_counts(conn)[0] < count:
            time.sleep(0.05)
        rows = conn.execute(
            sql.SQL("SELECT (result::text)::float8 * 1000 FROM {}.all_jobs").format(
                sql.Identifier(SCHEMA)
            )
        ).fetchall()
    latencies = sorted(float(row[0]) for row in rows)

    def percentile(p: float) -> float:
        return latencies[min(len(latencies) - 1, round(p / 100 * (len(latencies) - 1)))]

    return percentile(50), percentile(95), percentile(99)


# -- integrity -----------------------------------------------------------------------------------
PGTASKS_CHECKS: list[tuple[int, int]] = []  # (duplicates, lost) of each pgtasks processing run


def pgtasks_integrity(conn: psycopg.Connection[Any], jobs: int) -> tuple[int, int]:
    """Executions beyond one per job (claims counted by ``attempts``), and jobs never done."""
    row = conn.execute(
        sql.SQL(
            "SELECT coalesce(sum(attempts - 1) FILTER (WHERE attempts > 1), 0),"
            " count(*) FILTER (WHERE status = 'done') FROM {}.all_jobs"
        ).format(sql.Identifier(SCHEMA))
    ).fetchone()
    assert row is not None
    return int(row[0]), jobs - int(row[1])


#: Flags that hand the whole command line to a benchmark module of their own.
SUBCOMMANDS = {
    "--bloat": "bloat",  # bloat resilience: 1,000,000 jobs, then a pinned xmin horizon
    "--migrations": "migrations",  # enqueue and claim stalls while migrate runs
    "--limits": "limits",  # claims with and without concurrency and rate limits
    "--workflow-races": "workflow_races",  # chord races: stuck and doubled callbacks
    "--counters": "counters",  # what the counters of exercised guarantees cost
    "--enqueue": "enqueue",  # enqueue paths beside bare psycopg loops
    "--insert-costs": "insert_costs",  # what each trigger and index costs an insert
    "--in-process": "inprocess",  # the worker inside an asyncio program
    "--scaleout": "scaleout",  # 1, 2, 3 stores on as many CPU-capped PostgreSQL servers
    "--failover": "failover",  # a replica promoted under load: lost and doubled jobs
    "--big-group": "big_group",  # a group of up to 1,000,000 members: enqueue, page, CLI
    "--limit-changes": "limit_changes",  # a limit changed at runtime reaching the workers
    "--flow": "flow",  # drains with debounce keys, expires= and a batch handler vs plain
}


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    for flag, module_name in SUBCOMMANDS.items():
        if flag in arguments:
            # A benchmark with options of its own (benchmarks/<module>.py).
            module = importlib.import_module(f"benchmarks.{module_name}")
            rest = [argument for argument in arguments if argument != flag]
            return int(module.main(rest))
    args = parse_args(argv)
    dsn = resolve_dsn(args.dsn)
    facts = print_setting(dsn)
    print(f"jobs per processing run: {args.jobs}; runs per figure: {args.runs} (median)\n")
    runs = args.runs
    small = max(200, args.jobs // 10)
    figures: list[Figure] = []

    def add(figure: Figure) -> None:
        figures.append(figure)
        print(figure.row(), flush=True)

    add(
        Figure(
            "enqueue one by one (delay)",
            "jobs/s",
            repeat(runs, lambda: enqueue_one_by_one(dsn, small)),
        )
    )
    add(
        Figure(
            "enqueue bulk (delay_many x1000)",
            "jobs/s",
            repeat(runs, lambda: enqueue_bulk(dsn, args.jobs)),
        )
    )
    add(
        Figure(
            "enqueue transactional (100 per txn)",
            "jobs/s",
            repeat(runs, lambda: enqueue_transactional(dsn, small)),
        )
    )
    add(
        Figure(
            "raw SQL claim+finish loop (batch 10)",
            "jobs/s",
            repeat(runs, lambda: raw_sql_ceiling(dsn, args.jobs, 10)),
            "baseline",
        )
    )
    add(
        Figure(
            "raw SQL claim+finish loop (batch 50)",
            "jobs/s",
            repeat(runs, lambda: raw_sql_ceiling(dsn, args.jobs, 50)),
            "baseline",
        )
    )
    for concurrency in (1, 10, 50):
        add(
            Figure(
                f"worker, 1 process, concurrency {concurrency}",
                "jobs/s",
                repeat(runs, lambda c=concurrency: processing(dsn, args.jobs, c)),
            )
        )
    for concurrency, prefetch in ((10, 10), (50, 50), (50, 150)):
        add(
            Figure(
                f"worker, 1 process, concurrency {concurrency}, prefetch {prefetch}",
                "jobs/s",
                repeat(
                    runs,
                    lambda c=concurrency, p=prefetch: processing(
                        dsn, args.jobs, c, worker_flags=("--prefetch", str(p))
                    ),
                ),
                "best setting for no-op jobs",
            )
        )
    add(
        Figure(
            "worker, 1 process, async task, concurrency 50",
            "jobs/s",
            repeat(runs, lambda: processing(dsn, args.jobs, 50, task="anoop")),
        )
    )
    add(
        Figure(
            "worker, 2 processes, concurrency 50",
            "jobs/s",
            repeat(runs, lambda: processing(dsn, args.jobs, 50, workers=2)),
        )
    )
    for children in (1, 2):
        # The no-op sync task on the process executor: a pipe round trip per job.
        add(
            Figure(
                f"worker, 1 process, --pool process --processes {children}",
                "jobs/s",
                repeat(
                    runs,
                    lambda c=children: processing(
                        dsn, args.jobs, 1, worker_flags=("--pool", "process", "--processes", str(c))
                    ),
                ),
                "process executor",
            )
        )
    latency_runs = [idle_latency(dsn, 200 if not args.quick else 20, 0.02) for _ in range(runs)]
    for index, label in enumerate(("p50", "p95", "p99")):
        add(Figure(f"idle pickup latency {label}", "ms", [run[index] for run in latency_runs]))
    add_integrity_figures("", PGTASKS_CHECKS, add)
    if args.peers is not False:
        run_peers(dsn, args, add, explicit=args.peers is True)
    summary = side_by_side(figures, runs)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(
        json.dumps(
            {
                "machine": {"cores": os.cpu_count()},
                "postgres": facts,
                "figures": [figure.as_dict() for figure in figures],
                "summary": summary,
            },
            indent=2,
        )
    )
    print(f"\nwritten: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
