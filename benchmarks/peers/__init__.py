"""Peer queues measured beside pgtasks: PgQueuer and Procrastinate (the ``bench`` extra).

Each peer gets its own database on the benchmark server (``bench_pgqueuer_<db>``,
``bench_procrastinate_<db>``, named after the benchmark's database <db>), dropped and
recreated for every measurement, so its schema never meets pgtasks'. Each peer module
exposes the same functions as the pgtasks runner:

- ``enqueue_one_by_one(dsn, count) -> jobs/s``
- ``enqueue_bulk(dsn, count) -> jobs/s`` (batches of 1000 through the library's batch API)
- ``processing(dsn, jobs, concurrency) -> Drain`` (jobs/s, duplicates, lost) with one worker
  process of that library
- ``idle_latency(dsn, count, gap) -> (p50, p95, p99)`` in ms, enqueue -> task start

The libraries are imported lazily (inside the functions and in the worker modules), so
``python -m benchmarks`` runs without the extra.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType

INSTALL_HINT = "pip install 'pgtasks[bench]'"


@dataclass(frozen=True)
class Peer:
    name: str  # as printed: "PgQueuer"
    version: str  # the version the extra pins
    distribution: str  # top-level import name of the library
    module: str  # our benchmark module

    def available(self) -> bool:
        return importlib.util.find_spec(self.distribution) is not None

    def installed_version(self) -> str | None:
        return installed_version(self.distribution)

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


def installed_version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


PEERS = (
    Peer("PgQueuer", "1.6.0", "pgqueuer", "benchmarks.peers.pgqueuer_bench"),
    Peer("Procrastinate", "3.10.0", "procrastinate", "benchmarks.peers.procrastinate_bench"),
)


def available_peers() -> list[Peer]:
    return [peer for peer in PEERS if peer.available()]
