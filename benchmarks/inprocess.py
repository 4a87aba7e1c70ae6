"""The worker inside an asyncio program, beside the CLI worker and PgQueuer (``--in-process``).

    python -m benchmarks --in-process [--dsn DSN] [--jobs N] [--runs R] [--quick] [--no-peers]

Each processing figure drains N pre-enqueued no-op jobs with one process:

- ``pgtasks worker`` (the CLI process; the reference row), as the main runner measures it:
  first claim -> last finish, from the database's timestamps (a sync and an ``async def``
  no-op task);
- benchmarks/embedded.py, a program running an asyncio loop with the worker inside it:
  ``Worker(app, concurrency=C).run()`` in ``asyncio.to_thread`` (a sync task that records
  its argument in a dict under a ``threading.Lock``, and an ``async def`` one), and
  ``await Worker(app, concurrency=C).arun()``; default App and Worker settings, logging
  unconfigured;
- PgQueuer 1.6.0 on that program's loop: ``PgQueuer(AsyncpgDriver(conn)).run(batch_size=C)``.

In-process figures run from the first task start to the moment the program sees all N jobs
done in the database (it reads every 50 ms on its loop). The rows with ``prefetch 0`` are
the worker's earlier default, for comparison. Rounds alternate the systems (the machine's
load moves figures between runs: compare within one run); each figure is the median of the
rounds. Every run counts executions: duplicates and losses are reported. The idle pickup
latency of the CLI worker (default, and ``--prefetch 0``) follows, and the ratios of the
goals close the run (each figure over its reference of the same run: median over median,
and the lowest and highest ratio of one round): ``async def`` over sync tasks, in-process
and in the CLI worker, and the in-process worker over PgQueuer.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: One run of one system: jobs/s, duplicates, lost, CPU µs per job (None: not measured).
Run = Callable[[], "tuple[float, int, int, float | None]"]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks --in-process", description=__doc__)
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per processing run")
    parser.add_argument("--runs", type=int, default=3, help="rounds (median)")
    parser.add_argument("--concurrency", default="10,50", help="comma-separated")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round (smoke test)")
    parser.add_argument(
        "--peers", action=argparse.BooleanOptionalAction, default=None, help="also PgQueuer"
    )
    parser.add_argument(
        "--json", default=str(ROOT / "benchmarks" / "results" / "in-process.json"), help="output"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.runs = 200, 1
    return args


def embedded(dsn: str, jobs: int, concurrency: int, *options: str) -> dict[str, Any]:
    """Run benchmarks/embedded.py once; its JSON result."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.embedded",
            "--dsn",
            dsn,
            "--jobs",
            str(jobs),
            "--concurrency",
            str(concurrency),
            *options,
        ],
        cwd=ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"benchmarks.embedded {' '.join(options)} failed:\n{result.stderr}")
    document: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    if document["threads_left"]:
        print(f"  !! threads left after the worker stopped: {document['threads_left']}")
    return document


class Row:
    """One system's runs: rates and their integrity."""

    def __init__(self, name: str, note: str = "") -> None:
        self.name, self.note = name, note
        self.rates: list[float] = []
        #: The process's CPU per job while it drained (in-process pgtasks rows only).
        self.cpu: list[float] = []
        self.duplicates = 0
        self.lost = 0

    def add(self, rate: float, duplicates: int, lost: int, cpu: float | None) -> None:
        self.rates.append(rate)
        if cpu is not None:
            self.cpu.append(cpu)
        self.duplicates += duplicates
        self.lost += lost
        if duplicates or lost:
            print(f"  !! {self.name}: {duplicates} duplicate(s), {lost} lost", file=sys.stderr)

    @property
    def median(self) -> float:
        return statistics.median(self.rates)

    def line(self) -> str:
        low, high = min(self.rates), max(self.rates)
        cpu = f"  CPU {statistics.median(self.cpu):,.0f} us/job" if self.cpu else ""
        return (
            f"{self.name:72} {self.median:>8,.0f} jobs/s [{low:,.0f} .. {high:,.0f}]"
            f"  dup/lost {self.duplicates}/{self.lost}{cpu}  {self.note}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "median": self.median,
            "runs": self.rates,
            "duplicates": self.duplicates,
            "lost": self.lost,
            "cpu_us_per_job": self.cpu,
            "note": self.note,
        }


def measurements(dsn: str, jobs: int, concurrency: int, peers: bool) -> list[tuple[str, Run]]:
    """(row name, one run) for every system at this concurrency, in the order of a round."""
    from benchmarks import __main__ as runner

    def cli(*flags: str, task: str = "noop") -> Run:
        def run() -> tuple[float, int, int, float | None]:
            checks = len(runner.PGTASKS_CHECKS)
            rate = runner.processing(dsn, jobs, concurrency, task=task, worker_flags=flags)
            duplicates, lost = runner.PGTASKS_CHECKS[checks]
            return rate, duplicates, lost, None

        return run

    def program(*options: str) -> Run:
        def run() -> tuple[float, int, int, float | None]:
            runner.reset_schema(dsn)
            result = embedded(dsn, jobs, concurrency, *options)
            return (
                float(result["rate"]),
                int(result["duplicates"]),
                int(result["lost"]),
                float(result["drain_cpu_us_per_job"]),
            )

        return run

    def pgqueuer() -> tuple[float, int, int, float | None]:
        from benchmarks.peers import pgqueuer_bench

        target = pgqueuer_bench.install(dsn)
        result = embedded(target, jobs, concurrency, "--mode", "pgqueuer")
        return (
            float(result["rate"]),
            int(result["duplicates"]),
            int(result["lost"]),
            float(result["drain_cpu_us_per_job"]),
        )

    c = f"c{concurrency}"
    rows = [
        (f"pgtasks worker (CLI process), {c}", cli()),
        (f"pgtasks worker (CLI process), {c}, --prefetch 0", cli("--prefetch", "0")),
        (f"pgtasks worker (CLI process), async task, {c}", cli(task="anoop")),
        (
            f"in-process: asyncio.to_thread(Worker.run), sync task, {c}",
            program("--mode", "thread", "--task", "sync"),
        ),
        (
            f"in-process: asyncio.to_thread(Worker.run), sync task, {c}, prefetch 0",
            program("--mode", "thread", "--task", "sync", "--prefetch", "0"),
        ),
        (
            f"in-process: asyncio.to_thread(Worker.run), async task, {c}",
            program("--mode", "thread", "--task", "async"),
        ),
        (
            f"in-process: await Worker.arun(), sync task, {c}",
            program("--mode", "arun", "--task", "sync"),
        ),
    ]
    if peers:
        rows.append((f"in-process: PgQueuer 1.6.0 on the loop, batch_size {concurrency}", pgqueuer))
    return rows


def main(argv: list[str]) -> int:
    from benchmarks import __main__ as runner
    from benchmarks.peers import PEERS

    args = parse_args(argv)
    dsn = runner.resolve_dsn(args.dsn)
    facts = runner.print_setting(dsn)
    pgqueuer = next(peer for peer in PEERS if peer.name == "PgQueuer")
    peers = args.peers if args.peers is not None else pgqueuer.available()
    if peers and not pgqueuer.available():
        raise SystemExit("PgQueuer is not installed (pip install 'pgtasks[bench]')")
    load_before = os.getloadavg()
    print(
        f"jobs per run: {args.jobs}; rounds: {args.runs} (median); in-process: see --help;"
        " load average before: " + " ".join(f"{value:.2f}" for value in load_before) + "\n"
    )
    concurrencies = [int(part) for part in args.concurrency.split(",") if part.strip()]
    plan = [entry for c in concurrencies for entry in measurements(dsn, args.jobs, c, bool(peers))]
    rows = {name: Row(name) for name, _ in plan}
    for round_number in range(args.runs):
        # Alternate the order between rounds, so no system always runs first after a pause.
        ordered = plan if round_number % 2 == 0 else plan[::-1]
        for name, run in ordered:
            rows[name].add(*run())
        print(f"round {round_number + 1} of {args.runs} done", flush=True)
    latency_jobs = 20 if args.quick else 200
    latency, latency_before = [], []
    for _ in range(args.runs):
        latency.append(runner.idle_latency(dsn, latency_jobs, 0.02))
        latency_before.append(runner.idle_latency(dsn, latency_jobs, 0.02, "--prefetch", "0"))
    print(f"\nin-process (median of {args.runs} round(s), same server, same run)")
    for _, row in sorted(rows.items(), key=lambda item: plan_order(plan, item[0])):
        print(row.line())
    labels = ("p50", "p95", "p99")
    percentiles = {
        label: statistics.median(run[index] for run in latency)
        for index, label in enumerate(labels)
    }
    before = {
        label: statistics.median(run[index] for run in latency_before)
        for index, label in enumerate(labels)
    }
    for name, figures in (("", percentiles), (", --prefetch 0", before)):
        print(
            f"idle pickup latency (CLI worker, c10{name}): "
            + " / ".join(f"{figures[p]:.1f}" for p in labels)
            + " ms (p50 / p95 / p99)"
        )
    ratios = print_ratios(rows, concurrencies, bool(peers))
    print("load average after: " + " ".join(f"{value:.2f}" for value in os.getloadavg()))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(
        json.dumps(
            {
                "machine": {"cores": os.cpu_count(), "load_before": load_before},
                "postgres": facts,
                "jobs": args.jobs,
                "rows": [row.as_dict() for row in rows.values()],
                "ratios": ratios,
                "idle_latency_ms": percentiles,
                "idle_latency_prefetch_0_ms": before,
            },
            indent=2,
        )
    )
    print(f"\nwritten: {args.json}")
    return 0


#: (label, figure, reference) per concurrency; ``{c}`` is the concurrency's tag.
RATIOS = (
    (
        "async def / sync task, in-process",
        "in-process: asyncio.to_thread(Worker.run), async task, {c}",
        "in-process: asyncio.to_thread(Worker.run), sync task, {c}",
    ),
    (
        "async def / sync task, CLI worker",
        "pgtasks worker (CLI process), async task, {c}",
        "pgtasks worker (CLI process), {c}",
    ),
)
PEER_RATIOS = (
    (
        "in-process sync task / PgQueuer",
        "in-process: asyncio.to_thread(Worker.run), sync task, {c}",
        "in-process: PgQueuer 1.6.0 on the loop, batch_size {n}",
    ),
    (
        "in-process arun() / PgQueuer",
        "in-process: await Worker.arun(), sync task, {c}",
        "in-process: PgQueuer 1.6.0 on the loop, batch_size {n}",
    ),
    (
        "in-process async def / PgQueuer",
        "in-process: asyncio.to_thread(Worker.run), async task, {c}",
        "in-process: PgQueuer 1.6.0 on the loop, batch_size {n}",
    ),
)


def print_ratios(rows: dict[str, Row], concurrencies: list[int], peers: bool) -> list[Any]:
    """Each ratio of the goals, median / median of this run, with the per-round range."""
    print("\nratios (same run; median / median, per-round range in brackets)")
    found = []
    for concurrency in concurrencies:
        for label, figure, reference in RATIOS + (PEER_RATIOS if peers else ()):
            names = [
                name.format(c=f"c{concurrency}", n=concurrency) for name in (figure, reference)
            ]
            if not all(name in rows for name in names):
                continue
            top, bottom = rows[names[0]], rows[names[1]]
            ratio = top.median / bottom.median
            pairs = [a / b for a, b in zip(top.rates, bottom.rates, strict=True)]
            print(
                f"c{concurrency:<3} {label:36} {ratio:6.2f}"
                f"  [{min(pairs):.2f} .. {max(pairs):.2f}]"
                f"  ({top.median:,.0f} / {bottom.median:,.0f} jobs/s)"
            )
            found.append(
                {
                    "concurrency": concurrency,
                    "ratio": label,
                    "median": ratio,
                    "rounds": pairs,
                }
            )
    return found


def plan_order(plan: list[tuple[str, Any]], name: str) -> int:
    return [entry for entry, _ in plan].index(name)
