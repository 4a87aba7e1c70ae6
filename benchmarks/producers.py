"""Enqueue and drain throughput as concurrent producers multiply (``--producers``).

    python -m benchmarks.producers [--dsn DSN] [--producers 1,8,32,64] [--seconds S]
                                   [--rounds R] [--workers W] [--kinds K,...]
                                   [--mode processes|threads|both]

Each producer enqueues no-op jobs one by one, each in its own transaction, for S seconds
(all producers start together). ``--mode processes`` (the default) makes each producer a
process of its own; ``--mode threads`` makes them threads of one process, as a web server's
threads share one App (pgtasks kinds: one App whose pool holds a connection per thread;
the others: a connection per thread); ``--mode both`` runs each count both ways. W worker
processes drain the queue at the same time (concurrency 10 each). For each number of
producers it reports enqueues per second, the p50/p99 latency of one enqueue call, the
jobs drained per second over the same window and (pgtasks kinds) the notifications of the
queue per second: each one a commit that took PostgreSQL's notification lock. Kinds,
alternating in order from round to round:

- ``insert``: the physical reference, a bare psycopg ``INSERT ... RETURNING id`` into a
  table with only a primary key (no worker);
- ``insert+notify``: the same statement plus a ``pg_notify`` in its transaction, the cost
  of NOTIFY alone: PostgreSQL takes a lock on the notification queue at the commit of
  every transaction that notified and holds it through the commit's WAL flush, so such
  commits run one at a time and cannot share a flush;
- ``pgtasks``: ``noop.delay()`` with the default ``notify_enqueues=True``, W ``pgtasks
  worker`` processes draining;
- ``pgtasks-quiet``: the same with ``notify="off"``, producers and workers (no NOTIFY;
  the workers poll 50 ms after finding jobs, twice as late after each empty poll, up to
  ``poll_interval``, 1 s by default);
- ``pgtasks-auto``: the same with ``notify="auto"`` (a queue is notified at most once per
  ``notify_interval``, 0.2 s, by all the producers together; the workers poll as for
  ``pgtasks-quiet``);
- ``pgqueuer``: PgQueuer's ``Queries.enqueue`` one by one (it notifies from a trigger),
  W PgQueuer worker processes draining (when PgQueuer is installed: the ``bench`` extra).

Figures are medians of R rounds. The machine is shared by producers, workers and the
server: the figures say where the crossover lies on this machine, not a ceiling.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import psycopg
from psycopg import sql

from benchmarks.__main__ import ROOT, resolve_dsn, server_facts

SCHEMA = "bench_producers"
RAW_TABLE = "bench_producers_raw"
KINDS = ("insert", "insert+notify", "pgtasks", "pgtasks-quiet", "pgtasks-auto", "pgqueuer")
#: The notify mode of each pgtasks kind, producers and workers alike (App(notify=...)).
NOTIFY = {"pgtasks": "always", "pgtasks-quiet": "off", "pgtasks-auto": "auto"}
Sample = tuple[int, list[float]]


# -- producers (each a process of its own) --------------------------------------------------------
def _until(start_at: float) -> None:
    while (left := start_at - time.time()) > 0:
        time.sleep(min(left, 0.05))


def _timed(call: Callable[[], object], start_at: float, seconds: float) -> Sample:
    """Call ``call`` from ``start_at`` for ``seconds``: (calls, latencies of a sample)."""
    _until(start_at)
    latencies: list[float] = []
    count = 0
    end = start_at + seconds
    while (now := time.perf_counter()) and time.time() < end:
        call()
        count += 1
        if count % 4 == 1:
            latencies.append(time.perf_counter() - now)
    return count, latencies


def produce(kind: str, dsn: str, start_at: float, seconds: float) -> Sample:
    if kind in ("insert", "insert+notify"):
        notify = kind == "insert+notify"
        statement = sql.SQL(
            "WITH i AS (INSERT INTO {} (payload) VALUES ('{{}}') RETURNING id)"
            " SELECT id, pg_notify('bench_producers', 'q') FROM i"
            if notify
            else "INSERT INTO {} (payload) VALUES ('{{}}') RETURNING id"
        ).format(sql.Identifier(RAW_TABLE))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT 1")
            return _timed(lambda: conn.execute(statement).fetchone(), start_at, seconds)
    if kind.startswith("pgtasks"):
        from benchmarks.app import noop
        from pgtasks import App

        app = App(dsn, schema=SCHEMA, pool_max_size=1, notify=NOTIFY[kind])
        task = app.task(name=noop.name)(lambda: None)
        task.delay()  # connect and check the schema before the clock starts
        try:
            return _timed(task.delay, start_at, seconds)
        finally:
            app.close()
    from benchmarks.peers.pgqueuer_bench import ENTRYPOINT, connect, run

    async def go() -> Sample:
        queries, close = await connect(dsn)
        try:
            _until(start_at)
            latencies: list[float] = []
            count = 0
            end = start_at + seconds
            while time.time() < end:
                began = time.perf_counter()
                await queries.enqueue(ENTRYPOINT, None)
                count += 1
                if count % 4 == 1:
                    latencies.append(time.perf_counter() - began)
            return count, latencies
        finally:
            await close()

    return run(go())


def _produce(arguments: tuple[str, str, float, float]) -> Sample:
    return produce(*arguments)


def produce_in_threads(
    kind: str, dsn: str, start_at: float, seconds: float, producers: int
) -> list[Sample]:
    """``producers`` threads of this process enqueueing together: pgtasks kinds share one
    App (a pool connection per thread), the others take a connection per thread."""
    if not kind.startswith("pgtasks"):
        with ThreadPoolExecutor(producers) as threads:
            return list(threads.map(_produce, [(kind, dsn, start_at, seconds)] * producers))
    from benchmarks.app import noop
    from pgtasks import App

    app = App(
        dsn,
        schema=SCHEMA,
        pool_min_size=producers,
        pool_max_size=producers,
        notify=NOTIFY[kind],
    )
    task = app.task(name=noop.name)(lambda: None)
    try:
        with ThreadPoolExecutor(producers) as threads:
            # Connect and check the schema before the clock starts, on every connection.
            list(threads.map(lambda _: task.delay(), range(producers)))
            return list(
                threads.map(lambda _: _timed(task.delay, start_at, seconds), range(producers))
            )
    finally:
        app.close()


# -- the runner -----------------------------------------------------------------------------------
def prepare(kind: str, dsn: str) -> str:
    """Reset what ``kind`` writes to; return the DSN its producers use."""
    if kind in ("insert", "insert+notify"):
        with psycopg.connect(dsn, autocommit=True) as conn:
            table = sql.Identifier(RAW_TABLE)
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
            conn.execute(
                sql.SQL("CREATE TABLE {} (id bigserial PRIMARY KEY, payload jsonb)").format(table)
            )
        return dsn
    if kind.startswith("pgtasks"):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
        from benchmarks.app import app

        app.database.schema_checked = False
        app.migrate()
        app.close()
        return dsn
    from benchmarks.peers.pgqueuer_bench import install

    return install(dsn)


def done_count(kind: str, dsn: str) -> int:
    """pgtasks: jobs done so far; PgQueuer: minus the jobs still queued (it deletes a job
    when it finishes)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if kind.startswith("pgtasks"):
            query = sql.SQL("SELECT count(*) FROM {}.all_jobs WHERE status = 'done'").format(
                sql.Identifier(SCHEMA)
            )
        else:
            query = sql.SQL("SELECT -count(*) FROM pgqueuer WHERE status = 'queued'")
        row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


@contextmanager
def draining(kind: str, dsn: str, workers: int) -> Iterator[None]:
    """``workers`` worker processes of ``kind`` running (none for the raw inserts)."""
    if kind in ("insert", "insert+notify"):
        yield
        return
    environ = {**os.environ, "PGTASKS_DSN": dsn, "PGTASKS_SCHEMA": SCHEMA}
    if kind.startswith("pgtasks"):
        environ["PGTASKS_NOTIFY"] = NOTIFY[kind]
        command = [sys.executable, "-m", "pgtasks", "worker", "-A", "benchmarks.app:app"]
        command += ["--log-level", "ERROR", "--concurrency", "10"]
    else:
        command = [sys.executable, "-m", "benchmarks.peers.pgqueuer_worker", "--dsn", dsn]
        command += ["--concurrency", "10"]
    processes = [subprocess.Popen(command, cwd=ROOT, env=environ) for _ in range(workers)]
    try:
        _wait_started(kind, dsn, workers)
        yield
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_started(kind: str, dsn: str, workers: int) -> None:
    """Until every worker is ready: registered (pgtasks), connected (PgQueuer)."""
    if kind.startswith("pgtasks"):
        query = sql.SQL("SELECT count(*) FROM {}.workers").format(sql.Identifier(SCHEMA))
    else:
        query = sql.SQL(
            "SELECT count(DISTINCT pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    deadline = time.monotonic() + 60
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(query).fetchone()
            if row is not None and int(row[0]) >= workers:
                return
            time.sleep(0.1)
    raise RuntimeError(f"{workers} {kind} workers were not ready within 60 s")


@contextmanager
def listening(kind: str, dsn: str) -> Iterator[Callable[[], int]]:
    """pgtasks kinds: a listener on the queue's channel; the callable counts the
    notifications sent so far (each one a notifying commit). Others count none."""
    if not kind.startswith("pgtasks"):
        yield lambda: 0
        return
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(f"pgtasks.{SCHEMA}")))

        def count() -> int:  # delivered when read: the server kept them meanwhile
            return sum(1 for _ in conn.notifies(timeout=1.0))

        yield count


def measure(
    kind: str, dsn: str, producers: int, seconds: float, workers: int, mode: str = "processes"
) -> dict[str, float]:
    target = prepare(kind, dsn)
    with draining(kind, target, workers), listening(kind, target) as notified:
        before = done_count(kind, target) if kind not in ("insert", "insert+notify") else 0
        start_at = time.time() + 1.0 + producers * 0.03
        if mode == "threads":
            samples = produce_in_threads(kind, target, start_at, seconds, producers)
        else:
            context = multiprocessing.get_context("fork")
            with context.Pool(producers) as pool:
                samples = pool.map(_produce, [(kind, target, start_at, seconds)] * producers)
        after = done_count(kind, target) if kind not in ("insert", "insert+notify") else 0
        notifications = notified()
    latencies = sorted(value for _, values in samples for value in values)
    enqueued = sum(count for count, _ in samples)
    if kind == "pgqueuer":  # -(jobs left): drained = enqueued - left
        after += enqueued
    return {
        "enqueue": enqueued / seconds,
        "p50": latencies[len(latencies) // 2] * 1000,
        "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "drain": (after - before) / seconds,
        # The producers' notifying commits (pgtasks kinds; the first enqueue of each
        # producer, before the window, included).
        "notify": notifications / seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.producers", description=__doc__)
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--producers", default="1,8,32,64", help="comma-separated counts")
    parser.add_argument("--seconds", type=float, default=3.0, help="window of each run")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (median)")
    parser.add_argument("--workers", type=int, default=4, help="worker processes draining")
    parser.add_argument("--kinds", default=",".join(KINDS), help="which kinds to run")
    parser.add_argument(
        "--mode",
        choices=("processes", "threads", "both"),
        default="processes",
        help="producers as processes, as threads of one process, or both",
    )
    args = parser.parse_args(argv)
    modes = ["processes", "threads"] if args.mode == "both" else [args.mode]
    dsn = resolve_dsn(args.dsn)
    os.environ["PGTASKS_SCHEMA"] = SCHEMA  # before benchmarks.app is imported
    os.environ["PGTASKS_DSN"] = dsn
    counts = [int(part) for part in args.producers.split(",") if part.strip()]
    kinds = [kind for kind in args.kinds.split(",") if kind]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
    if "pgqueuer" in kinds:
        from benchmarks.peers import installed_version

        if installed_version("pgqueuer") is None:
            print("PgQueuer is not installed (the bench extra): skipping it")
            kinds.remove("pgqueuer")
    facts = server_facts(dsn)
    print(
        f"server {facts['server_version']}, fsync {facts['fsync']}, synchronous_commit"
        f" {facts['synchronous_commit']}; {args.workers} workers draining; {args.seconds:g} s"
        f" windows; {args.rounds} rounds; load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    results: dict[tuple[str, str, int], list[dict[str, float]]] = {}
    for round_number in range(args.rounds):
        order = kinds[round_number % len(kinds) :] + kinds[: round_number % len(kinds)]
        for mode in modes:
            for producers in counts:
                for kind in order:
                    figures = measure(kind, dsn, producers, args.seconds, args.workers, mode)
                    results.setdefault((mode, kind, producers), []).append(figures)
                    print(
                        f"  round {round_number + 1} {mode:9} {kind:14} x{producers:<3}"
                        f" {figures['enqueue']:8.0f}/s p99 {figures['p99']:7.2f} ms"
                        f" drained {figures['drain']:7.0f}/s"
                        f" notified {figures['notify']:6.0f}/s",
                        flush=True,
                    )
    print(f"\nmedians of {args.rounds} rounds (load average now {os.getloadavg()[0]:.1f})")
    for mode in modes:
        print(f"producers as {mode}")
        print(
            f"{'producers':>9} {'kind':14} {'enqueue/s':>10} {'p50 ms':>8} {'p99 ms':>8}"
            f" {'drained/s':>10} {'notify/s':>9}"
        )
        for producers in counts:
            for kind in kinds:
                rows = results[(mode, kind, producers)]
                median = {name: statistics.median(row[name] for row in rows) for name in rows[0]}
                print(
                    f"{producers:>9} {kind:14} {median['enqueue']:10.0f} {median['p50']:8.2f}"
                    f" {median['p99']:8.2f} {median['drain']:10.0f} {median['notify']:9.0f}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
