"""Start-up cost of ``pgtasks`` processes of two checkouts, interleaved (no database).

    python -m benchmarks.startup_ab --baseline /path/to/other/checkout [--runs R]

Each figure is a fresh Python process importing its own checkout's pgtasks (``import
pgtasks``, ``pgtasks --help``, ``pgtasks worker --help``, ``pgtasks jobs list --help``):
its CPU time (user + system, the figure a loaded machine changes least) and wall time,
the median of R rounds that alternate which checkout goes first, and their ratio.
Bytecode is cached (PYTHONPYCACHEPREFIX) as in the test suite, and a first unmeasured
round fills the cache.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.__main__ import ROOT

FIGURES = {
    "import pgtasks": ["-c", "import pgtasks"],
    "pgtasks --help": ["-m", "pgtasks", "--help"],
    "pgtasks worker --help": ["-m", "pgtasks", "worker", "--help"],
    "pgtasks jobs list --help": ["-m", "pgtasks", "jobs", "list", "--help"],
}


def measure(checkout: Path, arguments: list[str], cache: str) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one process importing ``checkout``'s pgtasks."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": cache, "COLUMNS": "80"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, *arguments],
        cwd=checkout,
        env=env,
        capture_output=True,
        check=True,
        timeout=120,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return cpu, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup_ab", description=__doc__)
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout")
    parser.add_argument("--runs", type=int, default=7, help="rounds (median)")
    args = parser.parse_args(argv)
    sides = {"this": ROOT, "baseline": args.baseline.resolve()}
    results: dict[tuple[str, str], list[tuple[float, float]]] = {
        (side, figure): [] for side in sides for figure in FIGURES
    }
    with tempfile.TemporaryDirectory(prefix="pgtasks-startup-") as cache:
        for side in sides:
            for arguments in FIGURES.values():
                measure(sides[side], arguments, cache)
        for round_number in range(args.runs):
            order = list(sides) if round_number % 2 == 0 else list(reversed(sides))
            for figure, arguments in FIGURES.items():
                for side in order:
                    results[side, figure].append(measure(sides[side], arguments, cache))
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"this: {ROOT}\nbaseline: {sides['baseline']}")
    print(f"rounds: {args.runs} (median seconds); load average after: {load}")
    heads = ("this cpu", "base cpu", "ratio", "this wall", "base wall")
    print(f"{'figure':26} " + " ".join(f"{head:>9}" for head in heads))
    for figure in FIGURES:
        this = [statistics.median(x[i] for x in results["this", figure]) for i in (0, 1)]
        base = [statistics.median(x[i] for x in results["baseline", figure]) for i in (0, 1)]
        ratio = this[0] / base[0] if base[0] else float("nan")
        cells = (this[0], base[0], ratio, this[1], base[1])
        print(f"{figure:26} " + " ".join(f"{cell:>9.3f}" for cell in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
