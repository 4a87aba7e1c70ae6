"""Start-up cost of ``pgtasks`` processes of two checkouts, interleaved (no database).

    python -m benchmarks.startup_ab --baseline /path/to/other/checkout [--runs R] [--dsn DSN]

Each figure is a fresh Python process importing its own checkout's pgtasks (``import
pgtasks``, ``pgtasks --help``, ``pgtasks worker --help``, ``pgtasks jobs list --help``):
its CPU time (user + system, the figure a loaded machine changes least) and wall time,
the median of R rounds that alternate which checkout goes first, and their ratio.
Bytecode is cached (PYTHONPYCACHEPREFIX) as in the test suite, and a first unmeasured
round fills the cache.

With ``--dsn`` (a server both checkouts' schema version matches), the processes the test
suite starts by the hundred are measured too, on a schema of their own migrated first:
``pgtasks worker`` and ``pgtasks beat`` from exec to the line the tests wait for (CPU
read from /proc at that line, then SIGTERM), ``pgtasks jobs list`` and a ``pgtasks
migrate`` with nothing to do.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
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

#: The schema the database figures run on (``--dsn``), unless ``--schema`` names another.
SCHEMA = "bench_startup"
#: A worker as the tests start one (tests/support/processes.py's TIMING_FLAGS).
WORKER_FLAGS = [
    "--lease-timeout=2",
    "--heartbeat-interval=0.3",
    "--rescue-interval=0.3",
    "--poll-interval=0.2",
]
#: Figures that need the database: the command and, for a long-running process, the
#: line of its log at which it is measured (then stopped).
DATABASE_FIGURES: dict[str, tuple[list[str], str | None]] = {
    "worker to started": (
        ["-m", "pgtasks", "worker", "-A", "tests.apps.basic:app", *WORKER_FLAGS],
        " started: ",
    ),
    "beat to starting": (["-m", "pgtasks", "beat", "-A", "tests.apps.basic:app"], "beat starting"),
    "jobs list": (["-m", "pgtasks", "jobs", "list", "-A", "tests.apps.basic:app"], None),
    "migrate (nothing to do)": (["-m", "pgtasks", "migrate", "-A", "tests.apps.basic:app"], None),
}


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_until(
    checkout: Path, arguments: list[str], cache: str, line: str, dsn: str, schema: str
) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of a process from exec to the log line containing
    ``line``; the process is then stopped (SIGTERM)."""
    env = process_env(cache, dsn, schema)
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, *arguments],
        cwd=checkout,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        seen = []
        for text in process.stderr:
            seen.append(text)
            if line in text:
                break
        else:
            raise RuntimeError(f"{arguments} exited before {line!r}:\n{''.join(seen)}")
        wall = time.perf_counter() - started
        cpu = process_cpu(process.pid)
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return cpu, wall


def process_env(cache: str, dsn: str | None = None, schema: str = SCHEMA) -> dict[str, str]:
    env = {**os.environ, "PYTHONPYCACHEPREFIX": cache, "COLUMNS": "80", "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if dsn is not None:
        env.update({"PGTASKS_DSN": dsn, "PGTASKS_TEST_SCHEMA": schema})
    return env


def prepare_schema(checkout: Path, cache: str, dsn: str, schema: str) -> None:
    """``checkout`` migrates the benchmark's ``schema`` (dropped first)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    command = ["-m", "pgtasks", "migrate", "-A", "tests.apps.basic:app"]
    subprocess.run(
        [sys.executable, *command],
        cwd=checkout,
        env=process_env(cache, dsn, schema),
        capture_output=True,
        check=True,
        timeout=300,
    )


def measure(
    checkout: Path,
    arguments: list[str],
    cache: str,
    dsn: str | None = None,
    schema: str = SCHEMA,
) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one process importing ``checkout``'s pgtasks."""
    env = process_env(cache, dsn, schema)
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
    parser.add_argument(
        "--dsn", default=None, help="also measure worker, beat and CLI processes on this server"
    )
    parser.add_argument(
        "--schema", default=SCHEMA, help="the schema of --dsn they run on (dropped, migrated)"
    )
    args = parser.parse_args(argv)
    sides = {"this": ROOT, "baseline": args.baseline.resolve()}
    figures: dict[str, tuple[list[str], str | None]] = {
        name: (arguments, None) for name, arguments in FIGURES.items()
    }
    if args.dsn:
        figures.update(DATABASE_FIGURES)

    def one(side: str, figure: str, cache: str) -> tuple[float, float]:
        arguments, line = figures[figure]
        if line is None:
            return measure(sides[side], arguments, cache, args.dsn, args.schema)
        return measure_until(sides[side], arguments, cache, line, args.dsn, args.schema)

    results: dict[tuple[str, str], list[tuple[float, float]]] = {
        (side, figure): [] for side in sides for figure in figures
    }
    with tempfile.TemporaryDirectory(prefix="pgtasks-startup-") as cache:
        if args.dsn:
            prepare_schema(sides["this"], cache, args.dsn, args.schema)
        for side in sides:
            for figure in figures:
                one(side, figure, cache)
        for round_number in range(args.runs):
            order = list(sides) if round_number % 2 == 0 else list(reversed(sides))
            for figure in figures:
                for side in order:
                    results[side, figure].append(one(side, figure, cache))
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"this: {ROOT}\nbaseline: {sides['baseline']}")
    print(f"rounds: {args.runs} (median seconds); load average after: {load}")
    heads = ("this cpu", "base cpu", "ratio", "this wall", "base wall")
    print(f"{'figure':26} " + " ".join(f"{head:>9}" for head in heads))
    for figure in figures:
        this = [statistics.median(x[i] for x in results["this", figure]) for i in (0, 1)]
        base = [statistics.median(x[i] for x in results["baseline", figure]) for i in (0, 1)]
        ratio = this[0] / base[0] if base[0] else float("nan")
        cells = (this[0], base[0], ratio, this[1], base[1])
        print(f"{figure:26} " + " ".join(f"{cell:>9.3f}" for cell in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
