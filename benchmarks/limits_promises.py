"""The promises of limits as a user meets them, on real ``pgtasks worker`` processes at their
default settings (no ``--poll-interval``): how fast a freed slot is taken, and the rate a
rate limit reaches. Run by ``python -m benchmarks --limits`` (benchmarks/limits.py).

This module imports nothing of pgtasks but its public API, so that one copy measures any
checkout: limits.py copies it into a temporary directory as ``pgtasks_bench_promises``
and runs ``python -m pgtasks_bench_promises SCENARIO`` with the checkout as the current
directory (its pgtasks is imported), the workers with it, on ``PGTASKS_DSN`` and a schema
of their own. The last line of output is one JSON document.

Scenarios:

- ``handoff-same``: one worker (concurrency 4), a backlog of jobs of a task limited to one
  at a time, each 20 ms: from the end of one job (its code, time.time()) to the start of
  the next, where the worker that ran it must claim the next itself.
- ``handoff-across``: two workers, one on queue ``qa`` and one on ``qb``; jobs of a task
  limited to one at a time, each 100 ms, alternate between the queues and each is
  enqueued once the one before started, so every freed slot is taken by the other worker
  (which waits for it).
- ``rate-5``, ``rate-20``: one worker, 25 jobs at "5/s" (60 at "20/s"): the rate reached
  after the first burst (claim times, the database's clock), and the most claims in any
  window of one second.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import psycopg
from psycopg import sql

from pgtasks import App

MODULE = "pgtasks_bench_promises"


def build_app() -> App:
    app = App(os.environ["PGTASKS_DSN"], schema=os.environ["PGTASKS_SCHEMA"])

    @app.task(name="promises.handoff", concurrency=1)
    def handoff(seconds: float) -> list[float]:
        started = time.time()
        time.sleep(seconds)
        return [started, time.time()]

    @app.task(name="promises.rate5", rate_limit="5/s")
    def rate5() -> None: ...

    @app.task(name="promises.rate20", rate_limit="20/s")
    def rate20() -> None: ...

    return app


def __getattr__(name: str) -> Any:
    """``app`` is built on first access (the workers import this module)."""
    if name == "app":
        built = globals().get("_app")
        if built is None:
            built = globals()["_app"] = build_app()
        return built
    raise AttributeError(name)


def start_worker(*arguments: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "pgtasks", "worker", "-A", f"{MODULE}:app", *arguments]
    return subprocess.Popen(
        [*command, "--log-level", "WARNING"], env=dict(os.environ), stdin=subprocess.DEVNULL
    )


def registered(conn: psycopg.Connection[Any], schema: str, count: int) -> None:
    """Wait until ``count`` workers registered (they store the limits as they start)."""
    query = sql.SQL("SELECT count(*) FROM {}.workers").format(sql.Identifier(schema))
    deadline = time.monotonic() + 60
    while (conn.execute(query).fetchone() or (0,))[0] < count:
        if time.monotonic() > deadline:
            raise RuntimeError("the workers did not start")
        time.sleep(0.02)


def wait_done(conn: psycopg.Connection[Any], schema: str, count: int, timeout: float) -> None:
    query = sql.SQL("SELECT count(*) FILTER (WHERE status = 'done') FROM {}").format(
        jobs_relation(conn, schema)
    )
    deadline = time.monotonic() + timeout
    while (conn.execute(query).fetchone() or (0,))[0] < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{count} jobs did not finish within {timeout} s")
        time.sleep(0.01)


def gaps(results: list[list[float]]) -> list[float]:
    """Seconds from each job's end to the next one's start (a limit of one at a time)."""
    spans = sorted(results)
    return [later[0] - earlier[1] for earlier, later in itertools.pairwise(spans)]


def handoff_same(app: App, conn: psycopg.Connection[Any], jobs: int) -> dict[str, Any]:
    task = app.tasks["promises.handoff"]
    workers = [start_worker("--concurrency", "4")]
    try:
        registered(conn, app.schema, 1)
        handles = task.delay_many([{"seconds": 0.02} for _ in range(jobs)])
        wait_done(conn, app.schema, jobs, timeout=120)
        return {"gaps": gaps([handle.get(timeout=10) for handle in handles])}
    finally:
        stop(workers)


def handoff_across(app: App, conn: psycopg.Connection[Any], jobs: int) -> dict[str, Any]:
    task = app.tasks["promises.handoff"]
    workers = [start_worker("--queues", "qa"), start_worker("--queues", "qb")]
    status = sql.SQL("SELECT status FROM {} WHERE id = %s").format(jobs_relation(conn, app.schema))
    try:
        registered(conn, app.schema, 2)
        handles = []
        for number in range(jobs):
            queue = "qa" if number % 2 == 0 else "qb"
            handles.append(task.apply_async(kwargs={"seconds": 0.1}, queue=queue))
            deadline = time.monotonic() + 30
            while (conn.execute(status, [handles[-1].id]).fetchone() or ("",))[0] == "pending":
                if time.monotonic() > deadline:
                    raise RuntimeError(f"job {handles[-1].id} did not start within 30 s")
                time.sleep(0.002)
        wait_done(conn, app.schema, jobs, timeout=60)
        return {"gaps": gaps([handle.get(timeout=10) for handle in handles])}
    finally:
        stop(workers)


def rate(app: App, conn: psycopg.Connection[Any], name: str, jobs: int) -> dict[str, Any]:
    task = app.tasks[name]
    workers = [start_worker()]
    try:
        registered(conn, app.schema, 1)
        task.delay_many([{} for _ in range(jobs)])
        wait_done(conn, app.schema, jobs, timeout=120)
        rows = conn.execute(
            sql.SQL("SELECT extract(epoch FROM locked_at) FROM {} ORDER BY locked_at").format(
                jobs_relation(conn, app.schema)
            )
        ).fetchall()
    finally:
        stop(workers)
    claims = [float(row[0]) for row in rows]
    # The bucket starts full: the jobs claimed at once first are its burst.
    burst = sum(1 for claim in claims if claim - claims[0] < 0.01)
    achieved = (len(claims) - burst) / (claims[-1] - claims[burst - 1])
    most = max(sum(1 for other in claims[index:] if other < start + 1.0)
               for index, start in enumerate(claims))  # fmt: skip
    return {"achieved": achieved, "burst": burst, "most_in_1s": most}


def jobs_relation(conn: psycopg.Connection[Any], schema: str) -> sql.Composable:
    """What reads every job of ``schema``, finished ones too: all_jobs where the checkout
    keeps finished jobs in jobs_history, else jobs."""
    row = conn.execute(
        "SELECT to_regclass(format('%%I.all_jobs', %s::text)) IS NOT NULL", [schema]
    ).fetchone()
    return sql.Identifier(schema, "all_jobs" if row and row[0] else "jobs")


def stop(workers: list[subprocess.Popen[bytes]]) -> None:
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()


def main(argv: list[str]) -> int:
    scenario, jobs = argv[0], int(argv[1])
    dsn, schema = os.environ["PGTASKS_DSN"], os.environ["PGTASKS_SCHEMA"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    app = build_app()
    app.migrate()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            if scenario == "handoff-same":
                result = handoff_same(app, conn, jobs)
            elif scenario == "handoff-across":
                result = handoff_across(app, conn, jobs)
            elif scenario == "rate-5":
                result = rate(app, conn, "promises.rate5", jobs)
            elif scenario == "rate-20":
                result = rate(app, conn, "promises.rate20", jobs)
            else:
                raise SystemExit(f"unknown scenario {scenario!r}")
    finally:
        app.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
