"""PgQueuer and Procrastinate beside pgtasks (the ``bench`` extra): each installed peer's
figures, measured with the same sizes on the same server, and the side-by-side table
that closes ``python -m benchmarks`` (one row per system, medians; duplicates and lost
jobs summed over the processing runs)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from benchmarks.figures import Figure, repeat


def add_integrity_figures(
    prefix: str, checks: list[tuple[int, int]], add: Callable[[Figure], None]
) -> None:
    """Duplicates and losses of every processing run, one value per run (the note: total)."""
    if not checks:
        return
    for index, label in enumerate(("duplicates", "lost jobs")):
        values = [float(check[index]) for check in checks]
        add(
            Figure(
                f"{prefix}{label} (processing runs)",
                "jobs",
                values,
                f"total {sum(values):,.0f} over {len(values)} runs",
            )
        )


def run_peers(
    dsn: str, args: argparse.Namespace, add: Callable[[Figure], None], *, explicit: bool
) -> None:
    """Each installed peer's figures, on the same server, each in its own database."""
    from benchmarks.peers import INSTALL_HINT, PEERS

    for peer in PEERS:
        if not peer.available():
            print(f"{peer.name}: not installed ({INSTALL_HINT})", flush=True)
            continue
        if peer.installed_version() != peer.version:
            print(
                f"{peer.name}: {peer.installed_version()} installed (the extra pins {peer.version})"
            )
        prefix = f"{peer.name}: "
        checks: list[tuple[int, int]] = []
        try:
            peer_figures(peer.load(), prefix, dsn, args, add, checks)
        except Exception as error:  # one peer failing must not lose the other figures
            print(f"{peer.name}: failed: {error!r}", file=sys.stderr, flush=True)
            if explicit:
                raise
        add_integrity_figures(prefix, checks, add)


def peer_figures(
    bench: Any,
    prefix: str,
    dsn: str,
    args: argparse.Namespace,
    add: Callable[[Figure], None],
    checks: list[tuple[int, int]],
) -> None:
    """The peer's rows: the same sizes as pgtasks' (``bench`` is its module in peers/)."""
    from functools import partial

    small = max(200, args.jobs // 10)

    def drain(concurrency: int) -> float:
        rate, duplicates, lost = bench.processing(dsn, args.jobs, concurrency)
        checks.append((duplicates, lost))
        return float(rate)

    one_by_one = partial(bench.enqueue_one_by_one, dsn, small)
    add(Figure(f"{prefix}enqueue one by one", "jobs/s", repeat(args.runs, one_by_one)))
    bulk = partial(bench.enqueue_bulk, dsn, args.jobs)
    add(Figure(f"{prefix}enqueue bulk (x1000)", "jobs/s", repeat(args.runs, bulk)))
    for concurrency in (10, 50):
        add(
            Figure(
                f"{prefix}worker, concurrency {concurrency}",
                "jobs/s",
                repeat(args.runs, partial(drain, concurrency)),
                bench.worker_note(concurrency),
            )
        )
    latency_jobs = 20 if args.quick else 200
    latency = [bench.idle_latency(dsn, latency_jobs, 0.02) for _ in range(args.runs)]
    for index, label in enumerate(("p50", "p95", "p99")):
        add(Figure(f"{prefix}idle pickup latency {label}", "ms", [run[index] for run in latency]))


SUMMARY_COLUMNS = (
    # key, pgtasks figure, peer figure (after "<peer>: ")
    ("enqueue_one_by_one", "enqueue one by one (delay)", "enqueue one by one"),
    ("enqueue_bulk", "enqueue bulk (delay_many x1000)", "enqueue bulk (x1000)"),
    ("processing_c10", "worker, 1 process, concurrency 10", "worker, concurrency 10"),
    ("processing_c50", "worker, 1 process, concurrency 50", "worker, concurrency 50"),
    ("latency_p50_ms", "idle pickup latency p50", "idle pickup latency p50"),
    ("latency_p95_ms", "idle pickup latency p95", "idle pickup latency p95"),
    ("latency_p99_ms", "idle pickup latency p99", "idle pickup latency p99"),
)


def side_by_side(figures: list[Figure], runs: int) -> list[dict[str, Any]]:
    """Print one row per system (medians; duplicates and lost summed) and return the rows."""
    from benchmarks.peers import PEERS, installed_version

    by_name = {figure.name: figure for figure in figures}
    systems = [("pgtasks", "", installed_version("pgtasks") or "")] + [
        (peer.name, f"{peer.name}: ", peer.installed_version() or "")
        for peer in PEERS
        if any(name.startswith(f"{peer.name}: ") for name in by_name)
    ]
    rows: list[dict[str, Any]] = []
    for system, prefix, version in systems:
        row: dict[str, Any] = {"system": system, "version": version}
        for key, own, peer_name in SUMMARY_COLUMNS:
            figure = by_name.get(own if not prefix else prefix + peer_name)
            row[key] = figure.median if figure else None
        # One worker process at its best setting (the highest median of the 1-process
        # processing figures; for a peer, of its concurrency 10 and 50 runs).
        single = [
            figure.median
            for name, figure in by_name.items()
            if figure.unit == "jobs/s"
            and name.startswith(prefix + "worker, ")
            and (prefix or not name.startswith(tuple(f"{peer.name}: " for peer in PEERS)))
            and "2 processes" not in name
        ]
        row["processing_best"] = max(single) if single else None
        for key, label in (("duplicates", "duplicates"), ("lost", "lost jobs")):
            figure = by_name.get(f"{prefix}{label} (processing runs)")
            row[key] = int(sum(figure.values)) if figure else None
        rows.append(row)

    def number(value: float | None, fmt: str = "{:,.0f}") -> str:
        return "—" if value is None else fmt.format(value)

    print(f"\nside by side (median of {runs} run(s), same server, same run; jobs/s unless ms)")
    header = (
        f"{'system':22} {'enqueue 1-by-1':>14} {'bulk x1000':>11} {'c10':>7} {'c50':>7}"
        f" {'best':>7}"
        f" {'idle p50 / p95 / p99 ms':>25} {'dup / lost':>11}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        latency = " / ".join(
            number(row[f"latency_{p}_ms"], "{:.1f}") for p in ("p50", "p95", "p99")
        )
        name = f"{row['system']} {row['version']}".strip()
        print(
            f"{name:22} {number(row['enqueue_one_by_one']):>14} {number(row['enqueue_bulk']):>11}"
            f" {number(row['processing_c10']):>7} {number(row['processing_c50']):>7}"
            f" {number(row['processing_best']):>7}"
            f" {latency:>25} {number(row['duplicates']) + ' / ' + number(row['lost']):>11}"
        )
    return rows
