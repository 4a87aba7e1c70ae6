"""The workers page's reads: the workers, what runs where (each running job with its task,
arguments cut and escaped, attempt, runtime and host), each live worker's last jobs, and
a summary per host. One read of the database per render."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg

from .._app.admin import WORKER_HISTORY
from .._operations import WorkerInfo
from .._running import FinishedJob, RunningJob, by_worker

if TYPE_CHECKING:
    from .._app.app import App
    from .._store.ports import DashboardPort
    from .reads import DashboardDatabase


@dataclasses.dataclass(frozen=True)
class HostSummary:
    """The workers of one host: how many are live, their slots and running jobs."""

    hostname: str
    paused: bool
    live: int
    workers: int
    concurrency: int
    running: int


def hosts(workers: list[WorkerInfo], paused: set[str]) -> list[HostSummary]:
    """Hosts of registered workers, and paused hosts (listed even without workers)."""
    grouped: dict[str, list[WorkerInfo]] = {name: [] for name in paused}
    for worker in workers:
        if worker.state in ("live", "silent") and worker.hostname is not None:
            grouped.setdefault(worker.hostname, []).append(worker)
    return [
        HostSummary(
            hostname=name,
            paused=name in paused,
            live=sum(worker.state == "live" for worker in members),
            workers=len(members),
            concurrency=sum(worker.concurrency or 0 for worker in members),
            running=sum(len(worker.running_job_ids) for worker in members),
        )
        for name, members in sorted(grouped.items())
    ]


def workers_page(app: App, database: DashboardDatabase) -> dict[str, Any]:
    """What the workers page shows (see the module docstring)."""

    def read(
        conn: psycopg.Connection[Any],
    ) -> tuple[datetime, list[WorkerInfo], list[RunningJob], list[FinishedJob], set[str]]:
        now, workers = app.admin.read_workers(conn, since=WORKER_HISTORY)
        running = app.admin.read_running(conn)
        live = [worker.id for worker in workers if worker.state == "live"]
        queries: DashboardPort = app.queries
        paused = {row["hostname"] for row in queries.get_paused_hosts(conn)}
        return now, workers, running, app.admin.read_last_jobs(conn, live), paused

    now, workers, running, last, paused = database.run(read)
    return {
        "now": now,
        "workers": workers,
        "running": running,
        "running_by_worker": by_worker(running),
        "last_jobs": by_worker(last),
        "hosts": hosts(workers, paused),
    }
