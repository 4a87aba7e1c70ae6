"""Capacity with 1, 2 and 3 stores on as many PostgreSQL servers (``--scaleout``).

    python -m benchmarks --scaleout [--jobs N] [--runs R] [--cpu SHARE] [--quick]

Three Debian PostgreSQL 15 clusters (scripts/ci-postgres15.sh: separate data directories,
127.0.0.11, .12, .13 and ports 54440, 54450, 54460), each in a cgroup v1 CPU group of its
own capped at ``--cpu`` of one core (default 0.1: cfs_quota_us 2 ms per 20 ms), so that
on this small machine the databases are the bottleneck, as they are for a user who needs
several. Workers are not capped. For N = 1, 2, 3: an app of N stores, one queue per
store, N x (jobs / N) no-op jobs enqueued beforehand (``delay_many``, uncapped), then one
``pgtasks worker --store`` process per store (concurrency 20) drains them. Throughput:
jobs over the span from the first claim to the last finish (the servers' own timestamps,
one clock). Database CPU per job: the clusters' cpuacct.usage over the drain, divided by
the jobs. Every job is checked done once (lost: not done; duplicates: run more than
once). Rounds alternate N = 1, 2, 3; figures are medians of R rounds (range shown).

The same drains run uncapped too, and are expected to stay flat: with no cap the
clusters share the machine's two cores with the workers, so a second server adds no CPU.

The producer's cost per ``delay()`` (process CPU time of M calls, one by one) is measured
on an app of one store against an app of three stores whose queue routes to its third,
alternating, median of R.

Without a writable /sys/fs/cgroup/cpu (cgroup v1), the capped runs are skipped, saying so.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.clusters import Cluster, pg15_available, start_clusters, stop_clusters

ROOT = Path(__file__).resolve().parent.parent
CPU_ROOT = Path("/sys/fs/cgroup/cpu")
CPUACCT_ROOT = Path("/sys/fs/cgroup/cpuacct")
HOSTS = ["127.0.0.11", "127.0.0.12", "127.0.0.13"]
FIRST_PORT = 54440
PERIOD_US = 20_000
APP_PATH = "benchmarks.scaleout_app:app"
CONCURRENCY = 20


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks --scaleout", description=__doc__)
    parser.add_argument("--jobs", type=int, default=30_000, help="jobs per drain (all stores)")
    parser.add_argument("--runs", type=int, default=3, help="rounds (median)")
    parser.add_argument("--cpu", type=float, default=0.1, help="CPU share of each cluster")
    parser.add_argument("--calls", type=int, default=3000, help="delay() calls per producer round")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round")
    parser.add_argument(
        "--json", default=str(ROOT / "benchmarks" / "results" / "scaleout.json"), help="output"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.runs, args.calls = 900, 1, 200
    return args


class CpuGroup:
    """A cgroup v1 cpu group (the quota) and cpuacct group (the usage) of one cluster."""

    def __init__(self, name: str) -> None:
        self.cpu = CPU_ROOT / name
        self.acct = CPUACCT_ROOT / name
        for directory in (self.cpu, self.acct):
            directory.mkdir(exist_ok=True)

    def add(self, pids: list[int]) -> None:
        for directory in (self.cpu, self.acct):
            for pid in pids:
                with suppress(ProcessLookupError):  # a process that ended meanwhile
                    (directory / "cgroup.procs").write_text(str(pid))

    def cap(self, share: float | None) -> None:
        quota = -1 if share is None else int(share * PERIOD_US)
        (self.cpu / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (self.cpu / "cpu.cfs_quota_us").write_text(str(quota))

    def usage_ns(self) -> int:
        return int((self.acct / "cpuacct.usage").read_text())

    def remove(self) -> None:
        for directory, root in ((self.cpu, CPU_ROOT), (self.acct, CPUACCT_ROOT)):
            try:
                for pid in (directory / "cgroup.procs").read_text().split():
                    (root / "cgroup.procs").write_text(pid)
                directory.rmdir()
            except OSError:
                pass


def cgroups_writable() -> str | None:
    """None when cpu and cpuacct groups can be made here; else why not."""
    for root in (CPU_ROOT, CPUACCT_ROOT):
        probe = root / f"pgtasks-probe-{os.getpid()}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError as error:
            return f"{root} is not writable ({error.strerror})"
    return None


def cluster_pids(cluster: Cluster) -> list[int]:
    """The postmaster and its children (background processes); new backends are forked
    by the postmaster and start in its group."""
    postmaster = cluster.pid()
    children = subprocess.run(
        ["pgrep", "-P", str(postmaster)], capture_output=True, text=True, check=False
    ).stdout.split()
    return [postmaster, *(int(pid) for pid in children)]


def stores_env(clusters: list[Cluster], schemas: list[str]) -> dict[str, str]:
    from benchmarks.scaleout_app import store_name

    stores = {
        store_name(index): {"dsn": cluster.dsn, "schema": schema}
        for index, (cluster, schema) in enumerate(zip(clusters, schemas, strict=True))
    }
    routes = {f"q{index}": store_name(index) for index in range(1, len(clusters))}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGTASKS_")}
    env.update(PGTASKS_STORES=json.dumps(stores), PGTASKS_ROUTES=json.dumps(routes))
    env["PYTHONUNBUFFERED"] = "1"
    return env


@contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def drain(
    clusters: list[Cluster],
    jobs: int,
    groups: list[CpuGroup] | None,
    tag: str,
    share: float | None = None,
) -> dict[str, float]:
    """Enqueue ``jobs`` over ``len(clusters)`` stores, drain them with one worker per
    store (the clusters capped at ``share`` during the drain only: migrating and
    enqueueing beforehand run uncapped); throughput, database CPU µs per job, lost and
    duplicated jobs."""
    from benchmarks import scaleout_app

    count = len(clusters)
    schemas = [f"scaleout_{tag}_{index}" for index in range(count)]
    env = stores_env(clusters, schemas)
    with environment(env):
        app = scaleout_app.build()
        try:
            app.migrate()
            per_store = jobs // count
            for index in range(count):
                task = app.tasks[f"scaleout.noop{index}"]
                for start in range(0, per_store, 5000):
                    task.delay_many(
                        [((n,), {}) for n in range(start, min(start + 5000, per_store))]
                    )
            for group in groups or []:
                group.cap(share)
            before = [group.usage_ns() for group in groups] if groups else []
            workers = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "pgtasks",
                        "worker",
                        "-A",
                        APP_PATH,
                        "--store",
                        scaleout_app.store_name(index),
                        "--concurrency",
                        str(CONCURRENCY),
                        "--log-level",
                        "warning",
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for index in range(count)
            ]
            try:
                deadline = time.monotonic() + 600
                while unfinished(clusters, schemas) and time.monotonic() < deadline:
                    time.sleep(0.2)
            finally:
                for worker in workers:
                    worker.terminate()
                for worker in workers:
                    worker.wait(60)
            after = [group.usage_ns() for group in groups] if groups else []
            for group in groups or []:
                group.cap(None)
            first, last, done, repeated = span(clusters, schemas)
            total = per_store * count
            cpu_ns = sum(a - b for a, b in zip(after, before, strict=True)) if groups else 0
            return {
                "throughput": done / max(last - first, 1e-9),
                "db_cpu_us_per_job": cpu_ns / 1000 / max(done, 1) if groups else float("nan"),
                "lost": float(total - done),
                "duplicates": float(repeated),
                "jobs": float(total),
            }
        finally:
            app.close()
            for cluster, schema in zip(clusters, schemas, strict=True):
                with psycopg.connect(cluster.dsn, autocommit=True) as conn:
                    conn.execute(
                        sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                    )


def unfinished(clusters: list[Cluster], schemas: list[str]) -> bool:
    for cluster, schema in zip(clusters, schemas, strict=True):
        with psycopg.connect(cluster.dsn) as conn:
            query = sql.SQL(
                "SELECT EXISTS (SELECT 1 FROM {}.jobs WHERE status IN ('pending', 'running'))"
            ).format(sql.Identifier(schema))
            if conn.execute(query).fetchone()[0]:  # type: ignore[index]
                return True
    return False


def span(clusters: list[Cluster], schemas: list[str]) -> tuple[float, float, int, int]:
    """First claim, last finish (Unix seconds), jobs done, jobs run more than once."""
    first, last, done, repeated = float("inf"), 0.0, 0, 0
    for cluster, schema in zip(clusters, schemas, strict=True):
        with psycopg.connect(cluster.dsn) as conn:
            row = conn.execute(
                sql.SQL(
                    "SELECT extract(epoch FROM min(started_at)),"
                    " extract(epoch FROM max(finished_at)),"
                    " count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE attempts > 1)"
                    " FROM {}.all_jobs"
                ).format(sql.Identifier(schema))
            ).fetchone()
            assert row is not None
            first, last = min(first, float(row[0])), max(last, float(row[1]))
            done, repeated = done + int(row[2]), repeated + int(row[3])
    return first, last, done, repeated


def producer_cost(
    clusters: list[Cluster], calls: int, rounds: int
) -> tuple[list[float], list[float]]:
    """µs of process CPU per delay(): one store, and three stores (queue routed to the
    third), alternating."""
    from pgtasks import App, Store

    one = App(clusters[0].dsn, schema="scaleout_producer_one")
    three = App(
        stores={
            "default": Store(clusters[0].dsn, schema="scaleout_producer_a"),
            "s1": Store(clusters[1 % len(clusters)].dsn, schema="scaleout_producer_b"),
            "s2": Store(clusters[2 % len(clusters)].dsn, schema="scaleout_producer_c"),
        },
        routes={"q2": "s2"},
    )
    tasks = []
    for app in (one, three):
        app.migrate()
        tasks.append(app.task(name="scaleout.produce", queue="q2")(noop))
    single, several = [], []
    try:
        for round_index in range(rounds * 2):
            order = (0, 1) if round_index % 2 == 0 else (1, 0)
            for which in order:
                task = tasks[which]
                task.delay(0)  # pools open, statements prepared
                started = time.process_time()
                for n in range(calls):
                    task.delay(n)
                cost = (time.process_time() - started) / calls * 1e6
                (single if which == 0 else several).append(cost)
    finally:
        one.close()
        three.close()
        for cluster in clusters:
            with psycopg.connect(cluster.dsn, autocommit=True) as conn:
                for schema in ("one", "a", "b", "c"):
                    conn.execute(
                        sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                            sql.Identifier(f"scaleout_producer_{schema}")
                        )
                    )
    return single, several


def noop(n: int) -> None:
    return None


def median_range(values: list[float], digits: int = 0) -> str:
    low, high = min(values), max(values)
    return f"{statistics.median(values):,.{digits}f} ({low:,.{digits}f} to {high:,.{digits}f})"


def run_mode(
    clusters: list[Cluster],
    groups: list[CpuGroup] | None,
    share: float | None,
    args: argparse.Namespace,
    label: str,
) -> dict[int, list[dict[str, float]]]:
    results: dict[int, list[dict[str, float]]] = {1: [], 2: [], 3: []}
    for round_index in range(args.runs):
        for count in (1, 2, 3):
            figures = drain(
                clusters[:count],
                args.jobs,
                groups[:count] if groups else None,
                f"{label}{round_index}n{count}",
                share,
            )
            results[count].append(figures)
            print(
                f"  {label} round {round_index + 1}, N={count}:"
                f" {figures['throughput']:,.0f} jobs/s,"
                f" DB CPU {figures['db_cpu_us_per_job']:.0f} µs/job, lost {figures['lost']:.0f},"
                f" duplicates {figures['duplicates']:.0f}",
                flush=True,
            )
    return results


def table(label: str, results: dict[int, list[dict[str, float]]]) -> list[dict[str, Any]]:
    base = statistics.median(r["throughput"] for r in results[1])
    base_cpu = statistics.median(r["db_cpu_us_per_job"] for r in results[1])
    rows = []
    print(f"\n{label}")
    print("| N | jobs/s (median, range) | x N = 1 | DB CPU µs/job | vs N = 1 | lost | duplicates |")
    print("|---|---|---|---|---|---|---|")
    for count, runs in results.items():
        throughput = [r["throughput"] for r in runs]
        cpu = [r["db_cpu_us_per_job"] for r in runs]
        ratio = statistics.median(throughput) / base
        cpu_ratio = statistics.median(cpu) / base_cpu if base_cpu == base_cpu else float("nan")
        lost = sum(r["lost"] for r in runs)
        duplicates = sum(r["duplicates"] for r in runs)
        print(
            f"| {count} | {median_range(throughput)} | {ratio:.2f}x | {median_range(cpu)} |"
            f" {cpu_ratio - 1:+.0%} | {lost:.0f} | {duplicates:.0f} |"
        )
        rows.append(
            {
                "stores": count,
                "throughput": throughput,
                "ratio": ratio,
                "db_cpu_us_per_job": cpu,
                "cpu_ratio": cpu_ratio,
                "lost": lost,
                "duplicates": duplicates,
            }
        )
    return rows


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if not pg15_available():
        print("--scaleout needs Debian's PostgreSQL 15 (apt-get install postgresql-15): skipped")
        return 0
    print(
        f"machine: {os.cpu_count()} cores; load average before: "
        + " ".join(f"{value:.2f}" for value in os.getloadavg())
    )
    print(
        f"jobs per drain: {args.jobs:,}; rounds: {args.runs}; one worker process per store,"
        f" concurrency {CONCURRENCY}"
    )
    why_not = cgroups_writable()
    directory = Path(tempfile.gettempdir()) / f"pgtasks-scaleout-{os.getpid()}"
    clusters = start_clusters(directory, HOSTS, FIRST_PORT)
    groups: list[CpuGroup] = []
    report: dict[str, Any] = {"jobs": args.jobs, "runs": args.runs, "cpu_share": args.cpu}
    try:
        for cluster in clusters:
            print(f"cluster: {cluster.dsn}")
        if why_not is None:
            for index, cluster in enumerate(clusters):
                group = CpuGroup(f"pgtasks-scaleout-{os.getpid()}-{index}")
                group.add(cluster_pids(cluster))
                groups.append(group)
            print(
                f"\ncapped: each cluster at {args.cpu:g} CPU"
                f" (cfs_quota_us {int(args.cpu * PERIOD_US)} of {PERIOD_US})"
            )
            capped = run_mode(clusters, groups, args.cpu, args, "capped")
            report["capped"] = table(f"Capped at {args.cpu:g} CPU per cluster", capped)
        else:
            print(
                f"\ncgroups are read-only here ({why_not}): the capped runs are skipped,"
                " and the uncapped figures below cannot show capacity growing with servers"
            )
        print("\nuncapped: the clusters share the machine's cores with the workers")
        uncapped = run_mode(clusters, groups or None, None, args, "uncapped")
        report["uncapped"] = table(
            "Uncapped (expected flat: no server brings CPU of its own)", uncapped
        )
        single, several = producer_cost(clusters, args.calls, max(2 * args.runs + 1, 7))
        change = statistics.median(several) / statistics.median(single) - 1
        print(
            f"\nproducer CPU per delay(): one store {median_range(single, 1)} µs,"
            f" three stores (routed) {median_range(several, 1)} µs ({change:+.1%})"
        )
        report["producer_us_per_delay"] = {
            "one_store": single,
            "three_stores": several,
            "change": change,
        }
    finally:
        for group in groups:
            group.remove()
        stop_clusters(clusters)
        shutil.rmtree(directory, ignore_errors=True)  # the clusters' state files
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"\nwrote {args.json}")
    return 0
