"""Enqueue throughput of two checkouts of pgtasks, interleaved on one server.

    python -m benchmarks.enqueue_ab --baseline /path/to/other/checkout [--dsn DSN]
                                    [--jobs N] [--runs R]

Runs the enqueue figures of ``python -m benchmarks`` (one by one, bulk x1000,
transactional 100 per transaction; plain jobs, no option) for this checkout and the
baseline in turn, R rounds, alternating which goes first, each in a fresh process that
imports its own checkout and migrates the benchmark schema with its own migrations.
Prints the median of each figure per checkout and their ratio. Interleaving keeps the
noise of a shared machine on both sides alike; it does not remove it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.__main__ import ROOT, resolve_dsn

FIGURES = ("enqueue_one_by_one", "enqueue_bulk", "enqueue_transactional")
_MEASURE = """
import json, sys
from benchmarks import __main__ as bench
dsn, small, jobs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print(json.dumps({
    "enqueue_one_by_one": bench.enqueue_one_by_one(dsn, small),
    "enqueue_bulk": bench.enqueue_bulk(dsn, jobs),
    "enqueue_transactional": bench.enqueue_transactional(dsn, small),
}))
"""


def measure(checkout: Path, dsn: str, small: int, jobs: int) -> dict[str, float]:
    """One round of the enqueue figures, in a process importing ``checkout``'s pgtasks."""
    completed = subprocess.run(
        [sys.executable, "-c", _MEASURE, dsn, str(small), str(jobs)],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result: dict[str, float] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.enqueue_ab", description=__doc__)
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout")
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per bulk run")
    parser.add_argument("--runs", type=int, default=5, help="rounds (median)")
    args = parser.parse_args(argv)
    dsn = resolve_dsn(args.dsn)
    small = max(200, args.jobs // 10)
    sides = {"this": ROOT, "baseline": args.baseline.resolve()}
    results: dict[str, dict[str, list[float]]] = {
        side: {figure: [] for figure in FIGURES} for side in sides
    }
    for round_number in range(args.runs):
        order = list(sides) if round_number % 2 == 0 else list(reversed(sides))
        for side in order:
            for figure, value in measure(sides[side], dsn, small, args.jobs).items():
                results[side][figure].append(value)
    print(f"this: {ROOT}\nbaseline: {sides['baseline']}\nrounds: {args.runs} (median, jobs/s)")
    print(f"{'figure':24} {'this':>10} {'baseline':>10} {'ratio':>7}")
    for figure in FIGURES:
        this = statistics.median(results["this"][figure])
        baseline = statistics.median(results["baseline"][figure])
        print(f"{figure:24} {this:>10,.0f} {baseline:>10,.0f} {this / baseline:>7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
