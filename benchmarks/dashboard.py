"""The dashboard's server time at 1,000,000 jobs, and worker throughput with it open.

    python -m benchmarks.dashboard [--dsn DSN] [--jobs 1000000] [--requests 50]
    python -m benchmarks.dashboard --throughput [--tp-jobs 20000] [--runs 5]
    python -m benchmarks.dashboard --index-cost [--runs 5]

Pages: 1,000,000 jobs are bulk-inserted with one INSERT … SELECT generate_series into the
schema ``pgtasks_bench_dashboard`` (90% done over 30 days, 5% failed, 1% cancelled, 4%
pending of which half due, 40 running, one in 20 running jobs reporting progress, one in
50 unique; 5 queues, 10 task names; limits as workers store them: bench.task_8 per key
(500 keys), bench.task_6 at a rate, queue q4 and bench.task_9's concurrency, so every
pending or running job outside a workflow is limited: 30,000 pending, 40 running). One job
in 10 is a step of a workflow of 5 (20,000 workflows at 1,000,000 jobs, their steps
interleaved with the other jobs as they were enqueued over the 30 days): chains, groups,
chords and a chain of a group, 5% failed (the steps after the failed one cancelled), 1%
cancelled, the 20 newest and one in 500 older ones running. Then three large workflows are
enqueued through the API, the newest: a chord of 1,000 members (half done), a chain of 200
steps (half done) and nested chords. Then VACUUM ANALYZE, as autovacuum would leave such a
table. Each page is requested N times in-process through httpx's ASGI transport (so the
figure is server time: routing, queries, rendering), in N rounds of every page in turn,
and p50/p95 are printed; so is each live page's re-render (what the event stream pushes).
The claim: every page answers in <= 50 ms (p95).

Workflow reads (``--workflow-reads``, on by default): the first page of the workflows in
each finished state as the dashboard reads it (no index finds them: at most
WORKFLOW_SCAN_JOBS workflow jobs, then "search older workflows"), against the exact read
of ``pgtasks workflows list --status`` (every workflow probed until the page is full),
on the same table, in alternating rounds; medians.

Limit reads (``--limit-reads``, on by default): the limits page's read (every running
limited job, the first LIMITED_SCAN pending ones in claim order) against the exact read of
``pgtasks limits`` (every pending limited job), on the same table, in alternating rounds;
medians.

Size-capped rows (``--capped``, on by default): the newest 50 jobs carry args, kwargs
and a result of 1 MiB each (random text: it does not compress) and a 64 KiB error, the
largest pgtasks stores by default. 8 loads of the jobs list run in parallel; the figures
are their server time and this process's peak of Python memory (tracemalloc) during
them, against the same loads of the full rows (what the list used to read).

Throughput (``--throughput``): a real ``pgtasks worker`` process (concurrency 10) runs N
pre-enqueued no-op jobs in the schema ``pgtasks_bench_dashboard_tp``, with no dashboard,
then with the dashboard served by uvicorn in this process and one browser-like client
holding the overview's event stream open (each finish notifies the done channel; the
overview is re-rendered at most four times a second, less when rendering is slow). After
a warm-up run, the modes
alternate (which goes first alternates too); medians and ranges are printed.
Throughput is computed from the database's timestamps (first claim to last finish).
Index cost (``--index-cost``): enqueue rates (``delay_many`` by 1,000 and ``delay`` one
by one) with and without migration 0006's jobs_pending_queue_idx, runs alternating.

The tables are filled by benchmarks/dashboard_data.py; the size-capped, throughput and
index-cost runs are in benchmarks/dashboard_costs.py.

Not a test: nothing here fails a build.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any
from urllib.parse import parse_qsl

import httpx
import psycopg
from psycopg import sql

from benchmarks.__main__ import ROOT, print_setting, resolve_dsn
from benchmarks.dashboard_costs import capped_rows, index_cost, throughput
from benchmarks.dashboard_data import PAGES_SCHEMA, populate, workflow_ids
from pgtasks import App
from pgtasks._job_filter import parse_job_filter
from pgtasks.web import asgi
from pgtasks.web.limit_pages import LimitsQuery
from pgtasks.web.workflow_pages import WorkflowQuery

#: The p95 every page (and live re-render) stays within at 1,000,000 jobs.
BUDGET_MS = 50.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dashboard", description=__doc__)
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--jobs", type=int, default=1_000_000, help="jobs in the table")
    parser.add_argument(
        "--requests", type=int, default=None, help="requests per page (default 50; quick: 5)"
    )
    parser.add_argument("--reuse", action="store_true", help="keep an existing populated schema")
    parser.add_argument("--throughput", action="store_true", help="worker throughput mode")
    parser.add_argument(
        "--index-cost",
        action="store_true",
        help="enqueue rate with and without jobs_pending_queue_idx (migration 0006)",
    )
    parser.add_argument("--tp-jobs", type=int, default=20_000, help="jobs per throughput run")
    parser.add_argument("--runs", type=int, default=5, help="throughput runs per mode")
    parser.add_argument(
        "--capped",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also load the jobs list over size-capped rows",
    )
    parser.add_argument(
        "--workflow-reads",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also compare the workflows list's reads of a finished state",
    )
    parser.add_argument(
        "--limit-reads",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also compare the limits page's read with pgtasks limits' exact read",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.tp_jobs, args.runs = 5_000, 500, 1
    if args.requests is None:
        args.requests = 5 if args.quick else 50
    return args


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def newest_id(dsn: str, condition: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            sql.SQL("SELECT max(id) FROM {}.all_jobs WHERE " + condition).format(
                sql.Identifier(PAGES_SCHEMA)
            )
        ).fetchone()
    return int(row[0]) if row and row[0] else 1


def page_list(dsn: str, jobs: int) -> list[tuple[str, str]]:
    """The pages timed: (path, name); ``live:`` paths are live re-renders."""
    failed_id = newest_id(dsn, "status = 'failed'")
    running_id = newest_id(dsn, "status = 'running' AND meta ? 'pgtasks.progress'")
    step_id = newest_id(dsn, "workflow_id IS NOT NULL")
    limited_id = newest_id(dsn, "status = 'pending' AND limit_key IS NOT NULL")
    far_back = failed_id - 100_000 if failed_id > 100_000 else failed_id
    flows = workflow_ids(dsn, jobs)
    return [
        ("/", "overview"),
        ("/jobs", "jobs, newest first"),
        ("/jobs?status=failed", "jobs, status failed"),
        ("/jobs?status=running", "jobs, status running"),
        ("/jobs?queue=q3&status=pending", "jobs, queue and status"),
        ("/jobs?queue=q2&status=pending&due=yes", "jobs, due in a queue"),
        ("/jobs?task=bench.task_7", "jobs, one task"),
        (f"/jobs?before={far_back}", "jobs, a page far back (keyset)"),
        ("/jobs?args=%5B%22user42%22%5D", 'jobs, args contain ["user42"] (1 in 1,000)'),
        ("/jobs/counts?status=failed&queue=q1", "bulk counts, failed in a queue"),
        ("/jobs/counts?task=bench.task_7", BACKGROUND + "bulk counts, one task (a scan)"),
        (f"/jobs/{failed_id}", "job page, failed"),
        (f"/jobs/{running_id}", "job page, running with progress"),
        (f"/jobs/{step_id}", "job page, a workflow step"),
        ("/workflows", "workflows, newest first"),
        ("/workflows?status=running", "workflows, running"),
        ("/workflows?status=failed", "workflows, failed"),
        ("/workflows?status=cancelled", "workflows, cancelled"),
        ("/workflows?status=done", "workflows, done"),
        (f"/workflows?before={flows['old']}", "workflows, a page far back (keyset)"),
        (f"/workflows?id={flows['old']}", "workflows, search by id"),
        (f"/workflows/{flows['old']}", "workflow page, 5 steps (failed)"),
        (f"/workflows/{flows['wide']}", "workflow page, chord of 1,000"),
        (f"/workflows/{flows['deep']}", "workflow page, chain of 200"),
        (f"/workflows/{flows['nested']}", "workflow page, nested chords"),
        (f"/jobs?workflow={flows['old']}", "jobs of a workflow (filter)"),
        (f"/jobs/{flows['callback']}", "job page, callback of 1,000"),
        ("/limits", "limits"),
        ("/limits?kind=key&keys=200", "limits, per key, the 200 busiest keys"),
        (f"/jobs/{limited_id}", "job page, a limited job"),
        ("/workers", "workers"),
        ("/schedules", "schedules"),
        ("live:/", "live re-render: overview"),
        ("live:/jobs", "live re-render: jobs, newest first"),
        ("live:/jobs?status=running", "live re-render: jobs, running"),
        (f"live:/jobs/{running_id}", "live re-render: job page"),
        ("live:/workers", "live re-render: workers"),
        ("live:/workflows", "live re-render: workflows"),
        ("live:/limits", "live re-render: limits"),
        (f"live:/workflows/{flows['wide']}", "live re-render: chord of 1,000"),
    ]


def live_render(state: Any, page: str) -> str:
    """What the event stream of ``page`` pushes after a notification (in a thread)."""
    path, _, query = page.partition("?")
    if path == "/":
        return str(state.fragment("_overview_live.html", "", **state.overview_context()))
    if path == "/workers":
        return str(state.fragment("_workers_live.html", "", **state.workers_context()))
    if path == "/jobs":
        job_filter = parse_job_filter(dict(parse_qsl(query)))
        return str(state.fragment("_jobs_live.html", "", **state.jobs_context(job_filter, None)))
    if path == "/workflows":
        pages = state.workflow_pages
        context = pages.workflows_context(WorkflowQuery.from_params(dict(parse_qsl(query))))
        return str(state.fragment("_workflows_live.html", "", **context))
    if path == "/limits":
        limits = LimitsQuery.from_params(dict(parse_qsl(query)))
        context = state.limit_pages.limits_context(limits)
        return str(state.fragment("_limits_live.html", "", **context))
    if path.startswith("/workflows/"):
        context = state.workflow_pages.workflow_context(int(path.rsplit("/", 1)[1]))
        return str(state.fragment("_workflow_live.html", "", **context))
    job_id = int(path.rsplit("/", 1)[1])
    return str(state.fragment("_job_live.html", "", **state.job_context(job_id)))


def page_times(dsn: str, jobs: int, requests: int, reuse: bool) -> list[dict[str, Any]]:
    app = App(dsn, schema=PAGES_SCHEMA, pool_max_size=4)
    populate(dsn, app, jobs, reuse)
    pages = page_list(dsn, jobs)
    dashboard = asgi(app)
    state = dashboard.dashboard
    results = []

    async def measure() -> None:
        transport = httpx.ASGITransport(app=dashboard)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:

            async def load(path: str) -> None:
                if path.startswith("live:"):
                    await asyncio.to_thread(live_render, state, path[len("live:") :])
                    return
                response = await client.get(path)
                if response.status_code != 200:
                    raise RuntimeError(f"{path}: HTTP {response.status_code}")

            for path, _ in pages:
                await load(path)  # warm: plans, template compilation, pool
            # Rounds of every page in turn (not each page's requests in a row): a burst of
            # load on the shared machine falls on every page alike.
            times: dict[str, list[float]] = {path: [] for path, _ in pages}
            for _ in range(requests):
                for path, _ in pages:
                    started = time.perf_counter()
                    await load(path)
                    times[path].append((time.perf_counter() - started) * 1000)
            for path, name in pages:
                results.append(
                    {
                        "path": path,
                        "page": name,
                        "p50_ms": statistics.median(times[path]),
                        "p95_ms": percentile(times[path], 0.95),
                    }
                )

    asyncio.run(measure())
    dashboard.close()
    app.close()
    return results


# -- limit reads ----------------------------------------------------------------------------------
def limit_reads(dsn: str, rounds: int = 7, reads: int = 5) -> None:
    """The limits page's read (every running limited job, the first LIMITED_SCAN pending
    ones in claim order) against the exact read of ``pgtasks limits``
    (``app.admin.read_limits``: every pending limited job), on the populated table, in
    alternating rounds; medians."""
    from pgtasks.web.limit_reads import LIMITED_SCAN, limits_page
    from pgtasks.web.reads import DashboardDatabase

    app = App(dsn, schema=PAGES_SCHEMA, pool_max_size=2)
    database = DashboardDatabase(app, pool_size=2, statement_timeout=30.0)
    print(
        f"\nthe limits, as the limits page reads them (every running limited job, the first"
        f" {LIMITED_SCAN:,} pending ones in claim order) vs the exact read of `pgtasks limits`"
        f" (every pending limited job) ({rounds} alternating rounds of {reads} reads;"
        " medians, ms)"
    )

    def page() -> int:
        return limits_page(app, database).pending_read

    def exact() -> int:
        with app.connection() as conn:
            return sum(state.pending for state in app.admin.read_limits(conn))

    times: dict[str, list[float]] = {"page": [], "exact": []}
    counted = {"page": page(), "exact": exact()}  # warm
    for round_number in range(rounds):
        order = [("page", page), ("exact", exact)]
        for name, read in order if round_number % 2 == 0 else order[::-1]:
            started = time.perf_counter()
            for _ in range(reads):
                read()
            times[name].append((time.perf_counter() - started) * 1000 / reads)
    print(f"{'READ':34} {'MEDIAN MS':>10}  PENDING JOBS COUNTED")
    print(
        f"{'the limits page':34} {statistics.median(times['page']):10.1f}"
        f"  {counted['page']:,} limited jobs read"
    )
    print(
        f"{'pgtasks limits (admin.read_limits)':34} {statistics.median(times['exact']):10.1f}"
        f"  {counted['exact']:,} job-instance pairs"
    )
    database.close()
    app.close()


# -- workflow reads -------------------------------------------------------------------------------
def workflow_reads(dsn: str, rounds: int = 7, reads: int = 5) -> None:
    """The first page (50) of the workflows in each finished state: the dashboard's read
    (at most WORKFLOW_SCAN_JOBS workflow jobs, then "search older workflows") against
    the exact read of ``pgtasks workflows list --status`` (every workflow probed, newest
    first, until the page is full), on the populated table, in alternating rounds."""
    from pgtasks._app.workflow_admin import list_workflows
    from pgtasks.web.workflow_reads import WORKFLOW_SCAN_JOBS

    app = App(dsn, schema=PAGES_SCHEMA, pool_max_size=2)
    print(
        f"\nworkflows in one finished state, first page of 50: the dashboard's read (at most"
        f" {WORKFLOW_SCAN_JOBS:,} workflow jobs) vs the exact read of `pgtasks workflows list"
        f" --status` ({rounds} alternating rounds of {reads} reads; medians, ms)"
    )
    print(f"{'STATE':10} {'DASHBOARD':>10} {'FOUND':>6} {'EXACT':>10} {'FOUND':>6}")
    for status in ("failed", "cancelled", "done"):

        def scan(status: str = status) -> int:
            with app.connection() as conn:
                rows, _, _ = app.queries.list_workflows_scan(
                    conn, status=status, limit=51, scan=WORKFLOW_SCAN_JOBS
                )
            return len(rows)

        def exact(status: str = status) -> int:
            return len(list_workflows(app, status=status, limit=51))

        times: dict[str, list[float]] = {"scan": [], "exact": []}
        found = {"scan": scan(), "exact": exact()}  # warm
        for round_number in range(rounds):
            order = [("scan", scan), ("exact", exact)]
            for name, read in order if round_number % 2 == 0 else order[::-1]:
                started = time.perf_counter()
                for _ in range(reads):
                    read()
                times[name].append((time.perf_counter() - started) * 1000 / reads)
        print(
            f"{status:10} {statistics.median(times['scan']):10.1f} {min(found['scan'], 50):6}"
            f" {statistics.median(times['exact']):10.1f} {min(found['exact'], 50):6}"
        )
    app.close()


#: Marks a read no page waits for: the jobs list's browser script asks for it after the
#: page has loaded (the bulk buttons' counts), so it is timed but not held to the budget.
BACKGROUND = "(background) "


def print_pages(results: list[dict[str, Any]], jobs: int, requests: int) -> bool:
    print(f"\nserver time per page at {jobs:,} jobs ({requests} requests each, in-process)")
    print(f"{'PAGE':44} {'P50 MS':>8} {'P95 MS':>8}  CLAIM (<= {BUDGET_MS:g} ms)")
    ok = True
    for result in results:
        name = result["page"]
        if name.startswith(BACKGROUND):
            claim = "n/a: fetched after the page, not a page"
            name = name[len(BACKGROUND) :]
        else:
            met = result["p95_ms"] <= BUDGET_MS
            ok &= met
            claim = "met" if met else "MISSED"
        print(f"{name:44} {result['p50_ms']:8.1f} {result['p95_ms']:8.1f}  {claim}")
    return ok


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dsn = resolve_dsn(args.dsn)
    sys.path.insert(0, str(ROOT))
    print_setting(dsn)
    if args.throughput:
        throughput(dsn, args.tp_jobs, args.runs)
        return 0
    if args.index_cost:
        index_cost(dsn, args.runs)
        return 0
    results = page_times(dsn, args.jobs, args.requests, args.reuse)
    ok = print_pages(results, args.jobs, args.requests)
    print(f"claim met: every page p95 <= {BUDGET_MS:g} ms" if ok else "claim MISSED")
    if args.workflow_reads:
        workflow_reads(dsn, rounds=1 if args.quick else 7)
    if args.limit_reads:
        limit_reads(dsn, rounds=1 if args.quick else 7)
    if args.capped:
        capped_rows(dsn, rows=5 if args.quick else 50, rounds=1 if args.quick else 3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
