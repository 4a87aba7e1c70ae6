"""The dashboard benchmark's runs around the pages (benchmarks/dashboard.py, which runs
them): the jobs list over size-capped rows (``--capped``), worker throughput with the
dashboard open (``--throughput``) and what migration 0006's index costs an enqueue
(``--index-cost``). Their descriptions are in dashboard.py's docstring.

Not a test: nothing here fails a build.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import httpx
import psycopg
from psycopg import sql

from benchmarks.__main__ import worker_processes
from benchmarks.dashboard_data import drop
from pgtasks import App
from pgtasks.web import asgi

THROUGHPUT_SCHEMA = "pgtasks_bench_dashboard_tp"
CAPPED_SCHEMA = "pgtasks_bench_dashboard_capped"

#: The newest jobs of the size-capped run: 1 MiB of random (incompressible) text in args,
#: kwargs and result, and a 64 KiB error (App's default caps).
CAPPED = """
INSERT INTO {schema}.jobs (task_name, queue, args, kwargs, status, attempts, max_attempts,
                           last_error, result, finished_at, locked_at)
SELECT 'bench.capped', 'q0',
       jsonb_build_array(blob.text), jsonb_build_object('blob', blob.text), 'failed', 3, 3,
       repeat('frame ' || md5(i::text) || E'\\n', 1700) || 'ValueError: capped ' || i,
       to_jsonb(blob.text), now(), now() - interval '1 second'
FROM generate_series(1, %(rows)s::int) AS i
CROSS JOIN LATERAL (
    SELECT string_agg(md5(i::text || ':' || g::text), '') AS text
    FROM generate_series(1, 32768) AS g
) AS blob
"""
#: What the jobs list read before it selected only what it shows (for the comparison).
FULL_ROWS = """
SELECT id, task_name, queue, priority, args, kwargs, status, attempts, max_attempts,
       run_at, locked_at, locked_by, last_error, result, idempotency_key,
       created_at, updated_at, finished_at, now() AS now
FROM {schema}.jobs ORDER BY id DESC LIMIT 51
"""


def capped_rows(dsn: str, rows: int = 50, loads: int = 8, rounds: int = 3) -> None:
    """The jobs list over the newest ``rows`` size-capped jobs: ``loads`` parallel loads,
    server time and Python memory, against reading the full rows (the former list)."""
    schema = CAPPED_SCHEMA
    drop(dsn, schema)
    app = App(dsn, schema=schema, pool_max_size=loads)
    app.migrate()
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        conn.execute(sql.SQL(CAPPED).format(schema=sql.Identifier(schema)), {"rows": rows})
        row = conn.execute(
            sql.SQL("SELECT pg_total_relation_size(%s)"), [f"{schema}.jobs"]
        ).fetchone()
        size = int(row[0]) if row else 0
    print(
        f"\n{rows} size-capped jobs (args, kwargs, result 1 MiB each, error 64 KiB;"
        f" {size / 2**20:,.0f} MiB stored) inserted in {time.perf_counter() - started:.1f} s"
    )
    dashboard = asgi(app, pool_size=loads)

    async def list_loads() -> tuple[float, int]:
        transport = httpx.ASGITransport(app=dashboard)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            started = time.perf_counter()
            responses = await asyncio.gather(*(client.get("/jobs") for _ in range(loads)))
            elapsed = time.perf_counter() - started
        assert all(response.status_code == 200 for response in responses)
        return elapsed, max(len(response.content) for response in responses)

    def full_loads() -> float:
        statement = sql.SQL(FULL_ROWS).format(schema=sql.Identifier(schema))

        def one() -> None:
            with app.connection() as conn:
                conn.execute(statement).fetchall()

        threads = [threading.Thread(target=one) for _ in range(loads)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.perf_counter() - started

    asyncio.run(list_loads())  # warm
    figures: dict[str, list[float]] = {"list": [], "list_peak": [], "full": [], "full_peak": []}
    page_bytes = 0
    for _ in range(rounds):
        tracemalloc.start()
        elapsed, page_bytes = asyncio.run(list_loads())
        figures["list_peak"].append(tracemalloc.get_traced_memory()[1] / 2**20)
        tracemalloc.stop()
        figures["list"].append(elapsed)
        tracemalloc.start()
        figures["full"].append(full_loads())
        figures["full_peak"].append(tracemalloc.get_traced_memory()[1] / 2**20)
        tracemalloc.stop()
    median = {name: statistics.median(values) for name, values in figures.items()}
    print(
        f"{loads} parallel loads of /jobs: {median['list'] * 1000:,.0f} ms in all, Python"
        f" memory peak {median['list_peak']:,.1f} MiB, page {page_bytes / 1024:,.0f} kB"
        f" (median of {rounds})"
    )
    print(
        f"the same {loads} loads reading the full rows (the former list's query, rows only,"
        f" no page rendered): {median['full'] * 1000:,.0f} ms, Python memory peak"
        f" {median['full_peak']:,.1f} MiB"
    )
    dashboard.close()
    app.close()
    drop(dsn, schema)


# -- throughput -----------------------------------------------------------------------------------
@contextmanager
def dashboard_open(app: App) -> Iterator[dict[str, int]]:
    """Serve the dashboard with uvicorn and hold its overview's event stream open."""
    import socket

    import uvicorn

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    config = uvicorn.Config(asgi(app), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    serving = threading.Thread(target=server.run, daemon=True)
    serving.start()
    while not server.started:
        time.sleep(0.01)
    seen = {"events": 0}
    stop = threading.Event()

    def watch() -> None:
        with (
            httpx.Client(timeout=httpx.Timeout(5.0, read=None)) as client,
            client.stream("GET", f"http://127.0.0.1:{port}/events") as response,
        ):
            for line in response.iter_lines():
                if line.startswith("event: update"):
                    seen["events"] += 1
                if stop.is_set():
                    return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    while seen["events"] == 0:
        time.sleep(0.01)
    try:
        yield seen
    finally:
        stop.set()
        server.should_exit = True
        serving.join(10)


def one_run(dsn: str, app: App, jobs: int, with_dashboard: bool) -> tuple[float, int]:
    import os

    drop(dsn, THROUGHPUT_SCHEMA)
    app.close()
    app.database.schema_checked = False
    app.migrate()
    os.environ["PGTASKS_SCHEMA"] = THROUGHPUT_SCHEMA
    os.environ["PGTASKS_DSN"] = dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.jobs (task_name, queue, args, kwargs, max_attempts)"
                " SELECT 'benchmarks.app.noop', 'default', '[]', '{{}}', 1"
                " FROM generate_series(1, %s)"
            ).format(sql.Identifier(THROUGHPUT_SCHEMA)),
            [jobs],
        )
    table = sql.Identifier(THROUGHPUT_SCHEMA)
    events = 0
    cpu_started, wall_started = time.process_time(), time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        watching = dashboard_open(app) if with_dashboard else nullcontext({"events": 0})
        with watching as seen, worker_processes(1, "--concurrency", "10"):
            deadline = time.monotonic() + 600
            query = sql.SQL("SELECT count(*) FROM {}.all_jobs WHERE status = 'done'").format(table)
            while (conn.execute(query).fetchone() or [0])[0] < jobs:
                if time.monotonic() > deadline:
                    raise RuntimeError("throughput run did not finish in 600 s")
                time.sleep(0.05)
            events = seen["events"]
        cpu = time.process_time() - cpu_started
        wall = time.perf_counter() - wall_started
        row = conn.execute(
            sql.SQL(
                "SELECT extract(epoch FROM max(finished_at) - min(locked_at)) FROM {}.all_jobs"
            ).format(table)
        ).fetchone()
    assert row is not None
    CPU_SHARES[with_dashboard].append(cpu / wall)
    return jobs / float(row[0]), events


#: CPU seconds per second of this process (the dashboard, its event-stream client and the
#: run's progress polling) during each run, by mode.
CPU_SHARES: dict[bool, list[float]] = {False: [], True: []}


def throughput(dsn: str, jobs: int, runs: int) -> None:
    app = App(dsn, schema=THROUGHPUT_SCHEMA, pool_max_size=4)
    figures: dict[bool, list[float]] = {False: [], True: []}
    events: list[int] = []
    one_run(dsn, app, max(100, jobs // 4), False)  # warm-up, not counted
    for run in range(runs):
        # Alternate which mode goes first: drift on a shared machine hits both alike.
        for with_dashboard in (False, True) if run % 2 == 0 else (True, False):
            rate, seen = one_run(dsn, app, jobs, with_dashboard)
            figures[with_dashboard].append(rate)
            if with_dashboard:
                events.append(seen)
            mode = "dashboard open" if with_dashboard else "no dashboard  "
            extra = f" ({seen} overview updates received)" if with_dashboard else ""
            print(f"run {run + 1}: {mode} {rate:8,.0f} jobs/s{extra}", flush=True)
    without, with_open = statistics.median(figures[False]), statistics.median(figures[True])
    print(
        f"\nworker throughput, {jobs:,} no-op jobs, 1 worker process, concurrency 10,"
        f" median of {runs}:"
    )
    print(f"  without the dashboard:            {without:8,.0f} jobs/s")
    print(
        f"  with the overview open and live:  {with_open:8,.0f} jobs/s"
        f"  ({(with_open / without - 1) * 100:+.1f}%)"
    )
    cpu_without = statistics.median(CPU_SHARES[False][1:] or CPU_SHARES[False])
    cpu_with = statistics.median(CPU_SHARES[True])
    print(
        f"  this process's CPU (dashboard, stream client, progress polling): {cpu_without:.1%}"
        f" of a core without the dashboard, {cpu_with:.1%} with it open"
    )
    drop(dsn, THROUGHPUT_SCHEMA)
    app.close()


# -- what jobs_pending_queue_idx costs an enqueue ---------------------------------------------
def index_cost(dsn: str, runs: int, bulk_jobs: int = 50_000, single_jobs: int = 3_000) -> None:
    """Enqueue with and without migration 0006's jobs_pending_queue_idx (dropped by
    migration 0031; runs alternate)."""
    import os

    os.environ["PGTASKS_SCHEMA"] = THROUGHPUT_SCHEMA
    os.environ["PGTASKS_DSN"] = dsn
    from benchmarks.app import app, noop

    figures: dict[tuple[str, bool], list[float]] = {}
    for run in range(runs):
        for with_index in (True, False) if run % 2 == 0 else (False, True):
            drop(dsn, THROUGHPUT_SCHEMA)
            app.close()
            app.database.schema_checked = False
            app.migrate()
            if with_index:  # migration 0031 dropped it: rebuilt as migration 0006 made it
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute(
                        sql.SQL(
                            "CREATE INDEX jobs_pending_queue_idx ON {}.jobs (queue, run_at)"
                            " WHERE status = 'pending' AND attempts >= 0"
                        ).format(sql.Identifier(THROUGHPUT_SCHEMA))
                    )
            with psycopg.connect(dsn, autocommit=True) as conn:
                lsn = "SELECT pg_current_wal_insert_lsn()"
                wal_from = (conn.execute(lsn).fetchone() or [None])[0]
                started = time.perf_counter()
                for _ in range(bulk_jobs // 1000):
                    noop.delay_many([{}] * 1000)
                bulk = bulk_jobs / (time.perf_counter() - started)
                row = conn.execute("SELECT pg_wal_lsn_diff(%s, %s)", [lsn_now(conn), wal_from])
                wal = float((row.fetchone() or [0])[0]) / bulk_jobs
            figures.setdefault(("wal", with_index), []).append(wal)
            started = time.perf_counter()
            for _ in range(single_jobs):
                noop.delay()
            single = single_jobs / (time.perf_counter() - started)
            figures.setdefault(("bulk", with_index), []).append(bulk)
            figures.setdefault(("single", with_index), []).append(single)
            label = "with" if with_index else "without"
            print(
                f"run {run + 1} {label:7} index: bulk {bulk:8,.0f}/s  one by one"
                f" {single:6,.0f}/s  WAL {wal:4.0f} bytes/job (bulk)"
            )
    for kind, name in (("single", "delay() one by one"), ("bulk", "delay_many x1000")):
        without = statistics.median(figures[(kind, False)])
        with_index = statistics.median(figures[(kind, True)])
        print(
            f"{name:20} without the index {without:8,.0f}/s, with it {with_index:8,.0f}/s"
            f" ({(with_index / without - 1) * 100:+.1f}%)"
        )
    wal_without = statistics.median(figures[("wal", False)])
    wal_with = statistics.median(figures[("wal", True)])
    print(
        f"WAL per bulk-enqueued job: without the index {wal_without:,.0f} bytes,"
        f" with it {wal_with:,.0f} bytes ({(wal_with / wal_without - 1) * 100:+.1f}%)"
    )
    drop(dsn, THROUGHPUT_SCHEMA)
    app.close()


def lsn_now(conn: psycopg.Connection[Any]) -> Any:
    return (conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone() or [None])[0]
