"""The dashboard's pages of two versions of pgtasks, in alternating rounds on one table.

    python -m benchmarks.dashboard_compare OLD_TREE [--rounds 10] [--requests 5]
        [--page NAME ...] [--dsn DSN]

OLD_TREE is a checkout of another version (``git archive REV | tar -x -C DIR``); the
other version is this tree. Both serve the table ``python -m benchmarks.dashboard``
populated (run it first, ``--reuse`` keeps it), each in a process of its own (its own
imports, pool and garbage collector), and answer rounds in turn: every page (or each
``--page``, by its name in benchmarks/dashboard.py) ``--requests`` times per round, the
old version first in even rounds, the new one first in odd ones, so that a burst of load
on a shared machine falls on both alike. Printed per page and version: the medians over
the rounds of each round's p50 and p95, and the p50 and p95 of all requests (ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def serve(tree: str, dsn: str, wanted: list[str]) -> None:
    """One side: the dashboard of the pgtasks in ``tree``, answering rounds read from
    stdin (a number of requests per page) with each page's times (JSON lines)."""
    sys.path.insert(0, tree)
    import httpx

    import pgtasks
    from benchmarks import dashboard as bench
    from benchmarks.dashboard_data import PAGES_SCHEMA
    from pgtasks import App
    from pgtasks.web import asgi

    for module in (bench.__file__, pgtasks.__file__):
        if not str(Path(str(module)).resolve()).startswith(str(Path(tree).resolve())):
            raise SystemExit(f"{module} is not in {tree}")
    app = App(dsn, schema=PAGES_SCHEMA, pool_max_size=4)
    listed = bench.page_list(dsn, 1_000_000)
    pages = [(path, name) for path, name in listed if not wanted or name in wanted]
    dashboard = asgi(app)
    state = dashboard.dashboard

    async def answer() -> None:
        transport = httpx.ASGITransport(app=dashboard)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:

            async def load(path: str) -> None:
                if path.startswith("live:"):
                    await asyncio.to_thread(bench.live_render, state, path[len("live:") :])
                    return
                response = await client.get(path)
                if response.status_code != 200:
                    raise RuntimeError(f"{path}: HTTP {response.status_code}")

            for path, _ in pages:
                await load(path)  # warm
            print(json.dumps([name for _, name in pages]), flush=True)
            for line in sys.stdin:
                times: dict[str, list[float]] = {name: [] for _, name in pages}
                for _ in range(int(line)):
                    for path, name in pages:
                        started = time.perf_counter()
                        await load(path)
                        times[name].append((time.perf_counter() - started) * 1000)
                print(json.dumps(times), flush=True)

    asyncio.run(answer())
    dashboard.close()
    app.close()


def compare(old: str, dsn: str, rounds: int, requests: int, wanted: list[str]) -> None:
    sides: dict[str, subprocess.Popen[str]] = {}
    for label, tree in (("old", old), ("new", str(ROOT))):
        # A script, not -m: nothing of this tree is imported before ``tree``'s.
        command = [sys.executable, str(Path(__file__).resolve()), "--serve", tree]
        command += ["--dsn", dsn, *(arg for name in wanted for arg in ("--page", name))]
        sides[label] = subprocess.Popen(
            command, cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
    names: list[str] = []
    for side in sides.values():
        assert side.stdout is not None
        names = json.loads(side.stdout.readline())
    every: dict[str, dict[str, list[float]]] = {label: {n: [] for n in names} for label in sides}
    per_round: dict[str, dict[str, list[tuple[float, float]]]] = {
        label: {n: [] for n in names} for label in sides
    }
    for number in range(rounds):
        for label in ("old", "new") if number % 2 == 0 else ("new", "old"):
            side = sides[label]
            assert side.stdin is not None and side.stdout is not None
            side.stdin.write(f"{requests}\n")
            side.stdin.flush()
            times: dict[str, list[float]] = json.loads(side.stdout.readline())
            for name, values in times.items():
                every[label][name] += values
                per_round[label][name].append((statistics.median(values), percentile(values, 0.95)))
    for side in sides.values():
        assert side.stdin is not None
        side.stdin.close()
        side.wait()
    print(
        f"{rounds} alternating rounds of {requests} requests per page; per version the"
        " medians over the rounds of each round's p50 / p95, then the p50 / p95 of all"
        f" {rounds * requests} requests (ms); old: {old}"
    )
    print(f"{'PAGE':44} {'OLD ROUNDS':>12} {'NEW ROUNDS':>12} {'OLD ALL':>12} {'NEW ALL':>12}")
    for name in names:
        cells: list[Any] = []
        for label in ("old", "new"):
            p50 = statistics.median(p for p, _ in per_round[label][name])
            p95 = statistics.median(p for _, p in per_round[label][name])
            cells.append(f"{p50:.1f}/{p95:.1f}")
        for label in ("old", "new"):
            values = every[label][name]
            cells.append(f"{statistics.median(values):.1f}/{percentile(values, 0.95):.1f}")
        print(f"{name[:44]:44} " + " ".join(f"{cell:>12}" for cell in cells))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dashboard_compare")
    parser.add_argument("old", nargs="?", help="a checkout of the other version")
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--requests", type=int, default=5, help="requests per page a round")
    parser.add_argument("--page", action="append", default=[], help="a page, by its name")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.dsn, args.page)
        return 0
    if not args.old:
        parser.error("name the checkout of the other version")
    if args.dsn is None:
        sys.path.insert(0, str(ROOT))
        from benchmarks.__main__ import resolve_dsn

        args.dsn = resolve_dsn(None)
    compare(args.old, args.dsn, args.rounds, args.requests, args.page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
