"""Claim throughput with and without concurrency limits, in one run (``--limits``).

    python -m benchmarks --limits [--dsn DSN] [--jobs N] [--runs R] [--claimers C] [--quick]

C claimer threads (one connection each, as C workers) drain N pre-enqueued jobs with the
worker's own round trip, ``Queries.finish_and_claim_jobs``: each round trip writes the
outcomes of the jobs its previous one claimed (done) and claims up to BATCH more. No task
code runs: the figure is the claim and finish path alone, jobs/s from first claim to last
finish. Modes, in alternating rounds (median of R):

- ``main's claim``: the claim statements without this branch's ``limit_groups IS NULL``
  filter (what the claim was before limits), plain jobs;
- ``plain``: the claim statements as they are now, plain jobs, no limit stored;
- ``plain, limits stored``: plain jobs on workers whose schema stores a limit (as a
  worker does, a claimer asks claim_limited first, and after it found nothing, once
  per poll interval of 1 s);
- ``task concurrency=50``: every job of a task limited to 50 running at once;
- ``key concurrency=1, 1000 keys``: every job limited to one running per key, over 1000 keys.

Then the same limits on one real ``pgtasks worker`` process (concurrency 10, no-op tasks;
each limited figure against the plain one of the same checkout), and the promises as a
user meets them on workers at their default settings (benchmarks/limits_promises.py):
the time from a job's end to the start of the next one under a limit of one at a time,
on the same worker and handed over to another worker (p50, p95), and the rate reached by
"5/s" and "20/s". With ``--baseline CHECKOUT``, the worker rounds and the promises run
for that checkout too, in alternating rounds (its pgtasks imported in the processes of
its side, each side in schemas of its own), and both sides are printed.
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
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pgtasks import App
from pgtasks._leases import ClaimedJob, ClaimRequest, Finish
from pgtasks._retry import Outcome
from pgtasks._store.queries import Queries

from .limits_promises import jobs_relation

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = "pgtasks_bench_limits"
BATCH = 10
#: As a worker's poll interval: how long a claimer skips the limited claim after a short one.
RETRY_LIMITED = 1.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks --limits", description=__doc__)
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per run")
    parser.add_argument("--runs", type=int, default=3, help="rounds (median)")
    parser.add_argument("--claimers", type=int, default=4, help="claimer threads")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round")
    parser.add_argument(
        "--json", default=str(ROOT / "benchmarks" / "results" / "limits.json"), help="output"
    )
    parser.add_argument(
        "--baseline", type=Path, default=None, help="another checkout: its promises too"
    )
    parser.add_argument("--only-promises", action="store_true", help="skip the throughput sections")
    parser.add_argument("--no-promises", action="store_true", help="skip the promises section")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.runs = 300, 1
    return args


def main_claim_store(store: Queries) -> Queries:
    """A Queries whose plain claims are the statements before limits (no limit filter)."""
    before: dict[str, bytes] = {}
    for name in ("claim_jobs", "claim_jobs_after"):
        text = store._statements[name]
        before[name] = text.replace(b"AND limit_groups IS NULL", b"")
        assert before[name] != text, name
    return store.overriding(before)


def build_app(dsn: str) -> tuple[App, dict[str, Any]]:
    app = App(dsn, schema=SCHEMA, pool_max_size=2)

    @app.task(name="bench.plain")
    def plain(n: int) -> None: ...

    @app.task(name="bench.task_limited", concurrency=50)
    def task_limited(n: int) -> None: ...

    @app.task(name="bench.key_limited", concurrency=1, concurrency_key=lambda key, **_: key)
    def key_limited(key: int, n: int) -> None: ...

    return app, {"plain": plain, "task": task_limited, "key": key_limited}


def reset(app: App, tasks: dict[str, Any], kind: str, jobs: int, store_limits: bool) -> None:
    with app.connection() as conn:
        conn.execute(
            sql.SQL("TRUNCATE {}.jobs, {}.jobs_history, {}.job_keys").format(
                *[sql.Identifier(SCHEMA)] * 3
            )
        )
        conn.execute(sql.SQL("DELETE FROM {}.limits").format(sql.Identifier(SCHEMA)))
        conn.execute(sql.SQL("DELETE FROM {}.workers").format(sql.Identifier(SCHEMA)))
        if store_limits:
            app.queries.upsert_limits(conn, app.limit_definitions())
    if kind == "key":
        tasks["key"].delay_many([{"key": n % 1000, "n": n} for n in range(jobs)])
    else:
        tasks[kind].delay_many([{"n": n} for n in range(jobs)])
    with app.connection() as conn:
        conn.execute(sql.SQL("VACUUM ANALYZE {}.jobs").format(sql.Identifier(SCHEMA)))


def drain(dsn: str, store: Queries, jobs: int, claimers: int, limited: bool) -> float:
    """Jobs/s of ``claimers`` threads draining the jobs (claim and finish round trips)."""
    done = [0] * claimers
    errors: list[BaseException] = []
    start = threading.Barrier(claimers + 1)

    def claimer(index: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                worker_id = store.register_worker(
                    conn, hostname="bench", pid=index, queues=None, concurrency=BATCH
                )
                start.wait()
                jobs_held: Sequence[ClaimedJob] = []
                idle = 0
                # As a worker does: after a limited claim that did not fill its batch, ask
                # for plain jobs alone until a poll interval (1 s) passed or a limited job
                # of its own ended.
                retry_limited_at = 0.0
                while True:
                    finished = [Finish.of(job, Outcome.done("null")) for job in jobs_held]
                    if any(job.limited for job in jobs_held):
                        retry_limited_at = 0.0
                    ask_limited = limited and time.monotonic() >= retry_limited_at
                    claim = ClaimRequest(worker_id, BATCH, limited=ask_limited)
                    jobs_held = store.finish_and_claim_jobs(conn, finished, claim).claimed
                    if ask_limited and sum(1 for job in jobs_held if job.limited) < BATCH:
                        retry_limited_at = time.monotonic() + RETRY_LIMITED
                    done[index] += len(finished)
                    if jobs_held:
                        idle = 0
                        continue
                    if sum(done) >= jobs:
                        return
                    idle += 1
                    time.sleep(min(0.001 * idle, 0.01))
        except BaseException as error:  # reported by the main thread
            errors.append(error)
            start.abort()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(claimers)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise errors[0]
    assert sum(done) == jobs, (sum(done), jobs)
    return jobs / elapsed


#: The module the worker rounds import: limits_app.py, copied next to any checkout.
WORKER_APP_MODULE = "pgtasks_bench_limits_app"


def checkout_env(directory: str, dsn: str, schema: str) -> dict[str, str]:
    """The environment of a process of one side: its module directory, DSN and schema."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PGTASKS_SCHEMA", "PGTASKS_APP", "DATABASE_URL")
    }
    env.update(PGTASKS_DSN=dsn, PGTASKS_SCHEMA=schema, PYTHONPATH=directory)
    return env


def worker_round(
    checkout: Path, dsn: str, schema: str, kind: str, app_name: str, jobs: int, concurrency: int
) -> float:
    """Jobs/s of one real ``pgtasks worker`` process of ``checkout`` draining ``jobs`` jobs
    of ``kind`` that the same checkout enqueued in ``schema`` (first claim to last finish,
    from the database's timestamps, as the main runner measures)."""
    with tempfile.TemporaryDirectory() as directory:
        shutil.copy(
            ROOT / "benchmarks" / "limits_app.py", Path(directory) / f"{WORKER_APP_MODULE}.py"
        )
        env = checkout_env(directory, dsn, schema)
        subprocess.run(
            [sys.executable, "-m", WORKER_APP_MODULE, "prepare", kind, str(jobs)],
            cwd=checkout,
            env=env,
            check=True,
            timeout=600,
        )
        command = [
            *(sys.executable, "-m", "pgtasks", "worker", "-A", f"{WORKER_APP_MODULE}:{app_name}"),
            *("--concurrency", str(concurrency), "--log-level", "WARNING"),
        ]
        process = subprocess.Popen(command, cwd=checkout, env=env)
        try:
            deadline = time.monotonic() + 600
            with psycopg.connect(dsn, autocommit=True) as conn:
                # Finished jobs are in jobs_history where the checkout has one (all_jobs).
                jobs_read = jobs_relation(conn, schema)
                count = sql.SQL("SELECT count(*) FILTER (WHERE status = 'done') FROM {}").format(
                    jobs_read
                )
                while (conn.execute(count).fetchone() or (0,))[0] < jobs:
                    if process.poll() is not None:
                        raise RuntimeError(f"the worker exited with {process.returncode}")
                    if time.monotonic() > deadline:
                        raise RuntimeError("the worker did not finish in 600 s")
                    time.sleep(0.05)
                row = conn.execute(
                    sql.SQL(
                        "SELECT extract(epoch FROM max(finished_at) - min(locked_at)),"
                        " count(*) FILTER (WHERE attempts <> 1) FROM {}"
                    ).format(jobs_read)
                ).fetchone()
        finally:
            process.terminate()
            process.wait(30)
    if row is None or row[1]:
        raise RuntimeError(f"jobs did not run exactly once: {row}")
    return jobs / float(row[0])


#: The promises measured (limits_promises.py): scenario, jobs per run (quick: fewer, the
#: least that still gives each figure: a few handoffs, and claims past the first burst
#: for a rate, whose jobs wait their tokens: 8 at "5/s" take over a second).
PROMISES = (
    ("handoff-same", 40, 8),
    ("handoff-across", 30, 4),
    ("rate-5", 25, 8),
    ("rate-20", 60, 12),
)


def promise_round(checkout: Path, dsn: str, scenario: str, jobs: int, schema: str) -> Any:
    """One run of a scenario of limits_promises.py with ``checkout``'s pgtasks."""
    with tempfile.TemporaryDirectory() as directory:
        shutil.copy(
            ROOT / "benchmarks" / "limits_promises.py",
            Path(directory) / "pgtasks_bench_promises.py",
        )
        env = checkout_env(directory, dsn, schema)
        completed = subprocess.run(
            [sys.executable, "-m", "pgtasks_bench_promises", scenario, str(jobs)],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    if completed.returncode != 0:
        raise RuntimeError(
            f"{scenario} on {checkout} failed:\n{completed.stdout}{completed.stderr}"
        )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def promises(args: argparse.Namespace, dsn: str) -> list[dict[str, Any]]:
    """The handoff and rate figures, for this checkout (and the baseline), alternating."""
    sides = sides_of(args)
    runs = max(1, args.runs)
    collected: dict[tuple[str, str], list[Any]] = {}
    for round_number in range(runs):
        order = list(sides) if round_number % 2 == 0 else list(reversed(sides))
        for scenario, jobs, quick_jobs in PROMISES:
            for side in order:
                schema = f"pgtasks_bench_promises_{side}"
                result = promise_round(
                    sides[side], dsn, scenario, quick_jobs if args.quick else jobs, schema
                )
                collected.setdefault((side, scenario), []).append(result)
    print(
        f"limits as users meet them: workers at their default settings, {runs} round(s)"
        + (f", alternating with {sides['baseline']}" if "baseline" in sides else "")
    )
    print(f"{'figure':44} " + " ".join(f"{side:>18}" for side in sides))
    results: list[dict[str, Any]] = []
    rows: dict[str, dict[str, str]] = {}
    for (side, scenario), runs_of in collected.items():
        if scenario.startswith("handoff"):
            pooled = [gap for run in runs_of for gap in run["gaps"]]
            p50, p95 = percentile(pooled, 0.5), percentile(pooled, 0.95)
            spread = [percentile(run["gaps"], 0.95) for run in runs_of]
            label = "same worker" if scenario == "handoff-same" else "to another worker"
            rows.setdefault(f"freed slot taken, {label}: p50", {})[side] = f"{p50 * 1000:.1f} ms"
            rows.setdefault(f"freed slot taken, {label}: p95", {})[side] = (
                f"{p95 * 1000:.1f} ms"
                + (f" ({min(spread) * 1000:.0f}-{max(spread) * 1000:.0f})" if runs > 1 else "")
            )
            results.append(
                {
                    "mode": f"{scenario} ({side})",
                    "handoff_p50_ms": p50 * 1000,
                    "handoff_p95_ms": p95 * 1000,
                    "handoffs": len(pooled),
                    "p95_per_round_ms": [value * 1000 for value in spread],
                }
            )
        else:
            declared = 5.0 if scenario == "rate-5" else 20.0
            achieved = [run["achieved"] for run in runs_of]
            median = statistics.median(achieved)
            label = f'rate "{int(declared)}/s" reached'
            rows.setdefault(label, {})[side] = f"{median:.2f}/s {median / declared:.0%}" + (
                f" ({min(achieved):.2f}-{max(achieved):.2f})" if runs > 1 else ""
            )
            rows.setdefault(f'rate "{int(declared)}/s": most claims in 1 s', {})[side] = str(
                max(run["most_in_1s"] for run in runs_of)
            )
            results.append(
                {
                    "mode": f"{scenario} ({side})",
                    "achieved_per_second": median,
                    "declared_per_second": declared,
                    "achieved_per_round": achieved,
                    "burst": max(run["burst"] for run in runs_of),
                    "most_in_1s": max(run["most_in_1s"] for run in runs_of),
                }
            )
    for label, values in rows.items():
        print(f"{label:44} " + " ".join(f"{values.get(side, '-'):>18}" for side in sides))
    return results


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.dsn:
        dsn = args.dsn
    else:
        from pgtasks._embedded import embedded_dsn

        dsn = embedded_dsn(ROOT / ".pgtasks-bench")
    results: list[dict[str, Any]] = []
    if not args.only_promises:
        results += throughput(args, dsn)
        results += worker_throughput(args, dsn)
    if not args.no_promises:
        results += promises(args, dsn)
    output = Path(args.json)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"claimers": args.claimers, "results": results}, indent=2))
    return 0


def throughput(args: argparse.Namespace, dsn: str) -> list[dict[str, Any]]:
    """The claim alone and one real worker: limited claims against plain ones."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    app, tasks = build_app(dsn)
    app.migrate()
    main_store = main_claim_store(app.queries)
    modes: list[tuple[str, str, Queries, bool, bool]] = [
        ("main's claim", "plain", main_store, False, False),
        ("plain", "plain", app.queries, False, False),
        ("plain, limits stored", "plain", app.queries, True, True),
        ("task concurrency=50", "task", app.queries, True, True),
        ("key concurrency=1, 1000 keys", "key", app.queries, True, True),
    ]
    print(
        f"claim throughput: {args.claimers} claimers, {BATCH} jobs per claim,"
        f" {args.jobs} jobs per run, {args.runs} round(s), median"
    )
    figures: dict[str, list[float]] = {label: [] for label, *_ in modes}
    for _ in range(args.runs):
        for label, kind, store, store_limits, limited in modes:
            reset(app, tasks, kind, args.jobs, store_limits)
            figures[label].append(drain(dsn, store, args.jobs, args.claimers, limited))
    baseline = statistics.median(figures["main's claim"])
    results: list[dict[str, Any]] = []
    print(f"{'mode':<30} {'jobs/s':>9} {'min':>9} {'max':>9} {'vs main':>8}")
    for label, values in figures.items():
        median = statistics.median(values)
        results.append(
            {
                "mode": label,
                "jobs_per_second": median,
                "min": min(values),
                "max": max(values),
                "ratio_to_main": median / baseline,
            }
        )
        print(
            f"{label:<30} {median:>9.0f} {min(values):>9.0f} {max(values):>9.0f}"
            f" {median / baseline:>7.0%}"
        )
    app.close()
    return results


def sides_of(args: argparse.Namespace) -> dict[str, Path]:
    """This checkout, and the baseline's when one is given."""
    sides = {"this": ROOT}
    if args.baseline is not None:
        sides["baseline"] = args.baseline.resolve()
    return sides


def worker_throughput(args: argparse.Namespace, dsn: str) -> list[dict[str, Any]]:
    """The same limits end to end: one real worker process (no-op tasks, concurrency 10)
    per round and mode, for this checkout and the baseline in alternating order, each in
    a schema of its own; each side's limited figures against its own plain one."""
    worker_modes = [
        ("worker: plain", "plain", "plain_app"),
        ("worker: task concurrency=50", "task", "limited_app"),
        ("worker: key concurrency=1, 1000 keys", "key", "limited_app"),
    ]
    sides = sides_of(args)
    worker_jobs = max(args.jobs, 300)
    print(
        f"worker throughput: one pgtasks worker, concurrency 10, {worker_jobs} no-op jobs,"
        f" {args.runs} round(s), median"
        + (f", alternating with {sides['baseline']}" if "baseline" in sides else "")
    )
    figures: dict[tuple[str, str], list[float]] = {}
    for round_number in range(args.runs):
        order = list(sides) if round_number % 2 == 0 else list(reversed(sides))
        for label, kind, app_name in worker_modes:
            for side in order:
                schema = f"{SCHEMA}_worker_{side}"
                figures.setdefault((side, label), []).append(
                    worker_round(sides[side], dsn, schema, kind, app_name, worker_jobs, 10)
                )
    results: list[dict[str, Any]] = []
    print(
        f"{'mode':<38} "
        + " ".join(f"{side + ' jobs/s (range)':>26} {'vs plain':>8}" for side in sides)
        + "   (vs plain: median of the rounds' ratios, each against the same round's plain)"
    )
    for label, _, _ in worker_modes:
        cells = []
        for side in sides:
            values = figures[(side, label)]
            plain = figures[(side, "worker: plain")]
            ratios = [value / base for value, base in zip(values, plain, strict=True)]
            ratio = statistics.median(ratios)
            results.append(
                {
                    "mode": f"{label} ({side})",
                    "jobs_per_second": statistics.median(values),
                    "per_round": values,
                    "ratio_to_plain_worker": ratio,
                    "ratio_per_round": ratios,
                    "ratio_of_medians": statistics.median(values) / statistics.median(plain),
                }
            )
            cells.append(
                f"{statistics.median(values):>9.0f} ({min(values):.0f}-{max(values):.0f})".rjust(26)
                + f" {ratio:>7.0%}"
            )
        print(f"{label:<38} " + " ".join(cells))
    return results
