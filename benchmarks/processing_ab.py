"""Worker throughput of two checkouts of pgtasks, interleaved on one server.

    python -m benchmarks.processing_ab --baseline /path/to/other/checkout [--dsn DSN]
                                       [--jobs N] [--runs R] [--concurrency 10,50]

Runs the processing figure of ``python -m benchmarks`` (a real ``pgtasks worker``
process draining N pre-enqueued no-op jobs; jobs/s from the database's timestamps, first
claim to last finish), or with ``--figure raw`` its raw-SQL ceiling (the worker's claim
and finish statements in a bare loop, ``concurrency`` jobs a round trip), for this
checkout and the baseline in turn, R rounds, alternating
which goes first, each in a fresh process that imports its own checkout (the worker it
starts runs that checkout too) and migrates the benchmark schema with its own
migrations. Prints, per concurrency, the median of each checkout, their ratio and the
rounds this checkout won. Interleaving keeps the noise of a shared machine on both sides
alike; it does not remove it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.__main__ import ROOT, resolve_dsn

_MEASURE = """
import json, sys
from benchmarks import __main__ as bench
dsn, jobs, concurrency, figure = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if figure == "raw":
    rate = bench.raw_sql_ceiling(dsn, jobs, concurrency)
else:
    rate = bench.processing(dsn, jobs, concurrency)
print(json.dumps({"jobs_per_second": rate}))
"""


def measure(checkout: Path, dsn: str, jobs: int, concurrency: int, figure: str = "worker") -> float:
    """One run, in a process importing ``checkout``'s pgtasks: a worker process draining
    the jobs (``worker``), or the worker's claim and finish statements in a bare loop
    claiming ``concurrency`` jobs per round trip (``raw``)."""
    completed = subprocess.run(
        [sys.executable, "-c", _MEASURE, dsn, str(jobs), str(concurrency), figure],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    result: dict[str, float] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result["jobs_per_second"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.processing_ab", description=__doc__)
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout")
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per run")
    parser.add_argument("--runs", type=int, default=5, help="rounds (median)")
    parser.add_argument(
        "--concurrency", default="10,50", help="worker concurrencies, comma-separated"
    )
    parser.add_argument(
        "--figure",
        choices=("worker", "raw"),
        default="worker",
        help="worker: a pgtasks worker process; raw: its claim and finish statements alone",
    )
    args = parser.parse_args(argv)
    dsn = resolve_dsn(args.dsn)
    concurrencies = [int(value) for value in args.concurrency.split(",") if value.strip()]
    sides = {"this": ROOT, "baseline": args.baseline.resolve()}
    results: dict[tuple[str, int], list[float]] = {
        (side, c): [] for side in sides for c in concurrencies
    }
    for round_number in range(args.runs):
        order = list(sides) if round_number % 2 == 0 else list(reversed(sides))
        for concurrency in concurrencies:
            line = []
            for side in order:
                rate = measure(sides[side], dsn, args.jobs, concurrency, args.figure)
                results[(side, concurrency)].append(rate)
                line.append(f"{side} {rate:,.0f}")
            print(f"round {round_number + 1}, c{concurrency}: {', '.join(line)} jobs/s", flush=True)
    print(f"this: {ROOT}\nbaseline: {sides['baseline']}")
    what = "1 worker process" if args.figure == "worker" else "claim+finish statements alone"
    print(f"{args.runs} rounds of {args.jobs:,} no-op jobs, {what} (median, jobs/s)")
    print(f"{'concurrency':12} {'this':>10} {'baseline':>10} {'ratio':>7}  this won")
    for concurrency in concurrencies:
        mine, theirs = results[("this", concurrency)], results[("baseline", concurrency)]
        wins = sum(a > b for a, b in zip(mine, theirs, strict=True))
        print(
            f"c{concurrency:<11} {statistics.median(mine):>10,.0f}"
            f" {statistics.median(theirs):>10,.0f}"
            f" {statistics.median(mine) / statistics.median(theirs):>7.3f}  {wins}/{len(mine)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
