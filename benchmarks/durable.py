"""Durable tasks: throughput of 1-step and 10-step durable jobs, and a step's checkpoint.

    python -m benchmarks.durable [--dsn DSN] [--jobs N] [--runs R] [--concurrency 10,50]
                                 [--dbos | --no-dbos]

Throughput: a real ``pgtasks worker`` process (``--concurrency c``) drains N
pre-enqueued jobs of ``benchmarks.app.durable`` (a bound task making 0, 1 or 10 no-op
``ctx.step`` calls); jobs/s from the database's timestamps (first claim to last
finish). The 0-step figure is the reference measured in the same run: plain jobs of a
bound task. Rounds alternate the order of the shapes; medians are printed.

Checkpoint cost: one process holding a claimed job's lease writes 2,000 checkpoints
through the Store's fenced statement (what ``ctx.step`` runs), one round trip each: µs
per checkpoint (wall clock, client included) and WAL bytes per checkpoint
(``pg_current_wal_lsn()`` before and after, on an otherwise idle server as far as the
machine allows).

``--dbos`` (default: on when ``pip`` can install it): DBOS Transact runs the same shapes
(a workflow of 1 or 10 no-op ``@DBOS.step`` calls, enqueued on a DBOS queue with worker
concurrency c) from a virtual environment of its own (``.venv-bench-dbos``, made by this
script with ``pip install dbos``), on the same server, in a database of its own
(``dbos_bench``); jobs/s from its workflow_status timestamps.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import psycopg
from psycopg import sql

from benchmarks.__main__ import (
    ROOT,
    SCHEMA,
    job_counts,
    print_setting,
    reset_schema,
    resolve_dsn,
    worker_processes,
)

SHAPES = (0, 1, 10)
CHECKPOINTS = 2_000
DBOS_VENV = ROOT / ".venv-bench-dbos"
DBOS_DATABASE = "dbos_bench"


def throughput(dsn: str, jobs: int, concurrency: int, steps: int) -> float:
    """Jobs/s of a worker process draining ``jobs`` durable jobs of ``steps`` steps."""
    reset_schema(dsn)
    from benchmarks.app import durable

    for start in range(0, jobs, 5000):
        durable.delay_many([{"steps": steps}] * min(5000, jobs - start))
    deadline = time.monotonic() + 600
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        worker_processes(1, "--concurrency", str(concurrency)),
    ):
        while job_counts(conn)[0] < jobs:
            if time.monotonic() > deadline:
                raise RuntimeError("the durable jobs did not finish in 600 s")
            time.sleep(0.05)
        row = conn.execute(
            sql.SQL(
                "SELECT extract(epoch FROM max(finished_at) - min(locked_at)),"
                " count(*) FILTER (WHERE result <> to_jsonb(%s::int)) FROM {}.all_jobs"
            ).format(sql.Identifier(SCHEMA)),
            (steps,),
        ).fetchone()
    assert row is not None
    if int(row[1]):
        raise RuntimeError(f"{row[1]} job(s) ended with a wrong result")
    return jobs / float(row[0])


def checkpoint_cost(dsn: str) -> tuple[float, float]:
    """(µs, WAL bytes) per checkpoint written under a held lease."""
    reset_schema(dsn)
    from benchmarks.app import app, durable
    from pgtasks._leases import ClaimRequest
    from pgtasks._store.durable import StepRecord

    durable.delay(steps=0)
    store = app.queries
    with psycopg.connect(dsn, autocommit=True) as conn:
        worker_id = store.register_worker(conn, hostname="bench", pid=0, queues=None, concurrency=1)
        [job] = store.claim_jobs(conn, ClaimRequest(worker_id=worker_id, limit=1))
        before = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
        started = time.perf_counter()
        for position in range(CHECKPOINTS):
            step = StepRecord(
                job.id,
                worker_id,
                job.attempt,
                "noop",
                position + 1,
                position,
                "done",
                "null",
                None,
                0.0,
            )
            row = store.record_job_step(conn, step)
            assert row["written"]
        elapsed = time.perf_counter() - started
        wal = conn.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", (str(before),)
        ).fetchone()[0]  # type: ignore[index]
    return elapsed / CHECKPOINTS * 1e6, float(wal) / CHECKPOINTS


# -- DBOS Transact ------------------------------------------------------------------------------
_DBOS_RUN = r"""
import json, sys, time
from dbos import DBOS, DBOSClient, DBOSConfig
import psycopg

url, jobs, concurrency, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
config: DBOSConfig = {"name": "bench", "system_database_url": url, "run_admin_server": False}
DBOS(config=config)

@DBOS.step()
def noop() -> None:
    return None

@DBOS.workflow()
def flow(n: int) -> int:
    for _ in range(n):
        noop()
    return n

DBOS.launch()
# Every workflow enqueued first (through a client, onto a queue not yet registered here:
# none starts), as pgtasks' jobs are before its worker starts; then the queue is
# registered and they run. Its dequeue polls the table: 10 ms between polls (the default
# is 1 s) gives DBOS its best.
client = DBOSClient(system_database_url=url)
for _ in range(jobs):
    client.enqueue({"queue_name": "bench", "workflow_name": "flow"}, steps)
DBOS.register_queue("bench", worker_concurrency=concurrency, polling_interval_sec=0.01)
with psycopg.connect(url, autocommit=True) as conn:
    deadline = time.monotonic() + 600
    while True:
        done, failed = conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'SUCCESS'),"
            " count(*) FILTER (WHERE status = 'ERROR') FROM dbos.workflow_status"
            " WHERE queue_name = 'bench'"
        ).fetchone()
        if done + failed >= jobs or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert (done, failed) == (jobs, 0), (done, failed)
    row = conn.execute(
        "SELECT (max(updated_at) - min(started_at_epoch_ms)) / 1000.0 FROM dbos.workflow_status"
        " WHERE queue_name = 'bench'"
    ).fetchone()
print(json.dumps({"jobs_per_second": jobs / float(row[0])}))
DBOS.destroy()
"""


def dbos_python() -> Path | None:
    """The benchmark venv's python with dbos installed (made on first use); None when pip
    cannot install it (offline)."""
    python = DBOS_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(DBOS_VENV)], check=True)
    check = subprocess.run([str(python), "-c", "import dbos"], capture_output=True)
    if check.returncode != 0:
        installed = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "dbos", "psycopg[binary]"],
            capture_output=True,
            text=True,
        )
        if installed.returncode != 0:
            print(f"dbos could not be installed: {installed.stderr.strip()[-300:]}")
            return None
    return python


def dbos_url(dsn: str) -> str:
    """A database of its own on the same server (recreated each run)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DBOS_DATABASE))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DBOS_DATABASE)))
    # A URL (DBOS parses it with SQLAlchemy): a socket directory goes in ?host=.
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    user = quote(str(info.get("user") or "postgres"), safe="")
    password = info.get("password")
    credentials = user + (f":{quote(str(password), safe='')}" if password else "")
    host, port = str(info.get("host") or "localhost"), info.get("port")
    query = ""
    if host.startswith("/"):
        query, host = f"?host={quote(host, safe='/')}", ""
        query += f"&port={port}" if port else ""
    elif port:
        host += f":{port}"
    return f"postgresql://{credentials}@{host}/{DBOS_DATABASE}{query}"


def dbos_throughput(python: Path, dsn: str, jobs: int, concurrency: int, steps: int) -> float:
    completed = subprocess.run(
        [str(python), "-c", _DBOS_RUN, dbos_url(dsn), str(jobs), str(concurrency), str(steps)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"DBOS run failed: {completed.stderr.strip()[-1000:]}")
    result: dict[str, float] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result["jobs_per_second"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.durable", description=__doc__)
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--jobs", type=int, default=2_000, help="jobs per run")
    parser.add_argument("--runs", type=int, default=3, help="rounds (median)")
    parser.add_argument("--concurrency", default="10,50", help="worker concurrencies")
    parser.add_argument("--dbos", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args(argv)
    dsn = resolve_dsn(args.dsn)
    print_setting(dsn)
    python = dbos_python() if args.dbos else None
    concurrencies = [int(value) for value in args.concurrency.split(",")]
    rates: dict[tuple[str, int, int], list[float]] = {}
    for round_number in range(args.runs):
        for concurrency in concurrencies:
            shapes = SHAPES if round_number % 2 == 0 else tuple(reversed(SHAPES))
            for steps in shapes:
                rate = throughput(dsn, args.jobs, concurrency, steps)
                rates.setdefault(("pgtasks", concurrency, steps), []).append(rate)
                where = f"round {round_number + 1}, c{concurrency}, {steps} steps"
                print(f"{where}: pgtasks {rate:,.0f} jobs/s")
                if python is not None and steps:
                    rate = dbos_throughput(python, dsn, args.jobs, concurrency, steps)
                    rates.setdefault(("dbos", concurrency, steps), []).append(rate)
                    print(f"{where}: DBOS {rate:,.0f} jobs/s")
    costs = [checkpoint_cost(dsn) for _ in range(args.runs)]
    print(f"\n{args.runs} rounds of {args.jobs:,} jobs, 1 worker process (median jobs/s)")
    print(f"{'shape':18} {'pgtasks':>9} {'DBOS':>9} {'ratio':>7}")
    for concurrency in concurrencies:
        for steps in SHAPES:
            ours = statistics.median(rates[("pgtasks", concurrency, steps)])
            theirs = rates.get(("dbos", concurrency, steps))
            other = statistics.median(theirs) if theirs else None
            label = f"c{concurrency} {steps} steps" + (" (plain)" if steps == 0 else "")
            print(
                f"{label:18} {ours:9,.0f} "
                + (f"{other:9,.0f} {ours / other:7.2f}" if other else f"{'-':>9} {'-':>7}")
            )
    print(
        f"checkpoint: {statistics.median(cost for cost, _ in costs):.0f} µs and"
        f" {statistics.median(wal for _, wal in costs):.0f} WAL bytes per step"
        f" (median of {args.runs} x {CHECKPOINTS:,}, one round trip each)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
