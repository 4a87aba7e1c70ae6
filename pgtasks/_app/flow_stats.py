"""What ``pgtasks limits`` and the dashboard's limits page show of debounce and batches
(docs/howto/flow-control.md): the pending debounced jobs per task and the enqueues they
absorbed, the batch tasks with their sizes, and the store's counters of both."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import psycopg

from .._counters import BATCH_JOBS, BATCHES_RUN, ENQUEUES_DEBOUNCED
from .._operations import format_table

if TYPE_CHECKING:
    from .._store.ports import OperatorsPort
    from .app import App
    from .tasks import Task


@dataclasses.dataclass(frozen=True)
class DebouncedTask:
    """A task's pending debounced jobs: how many, the enqueues they absorbed in all
    (``replaced``) and the most one of them absorbed."""

    task: str
    jobs: int
    replaced: int
    most_replaced: int


@dataclasses.dataclass(frozen=True)
class BatchTask:
    """A batch task of the app: its ``max_size`` and ``max_wait`` (seconds)."""

    task: str
    max_size: int
    max_wait: float


@dataclasses.dataclass(frozen=True)
class FlowStats:
    debounced: tuple[DebouncedTask, ...]
    batches: tuple[BatchTask, ...]
    #: The store's counters (every process): enqueues that replaced a pending job,
    #: batches run and the jobs they held.
    enqueues_debounced: int = 0
    batches_run: int = 0
    batch_jobs: int = 0

    @property
    def mean_batch_size(self) -> float | None:
        return self.batch_jobs / self.batches_run if self.batches_run else None

    def as_json(self) -> dict[str, Any]:
        return {
            "debounced": [dataclasses.asdict(row) for row in self.debounced],
            "enqueues_debounced": self.enqueues_debounced,
            "batch_tasks": [dataclasses.asdict(row) for row in self.batches],
            "batches_run": self.batches_run,
            "batch_jobs": self.batch_jobs,
            "mean_batch_size": self.mean_batch_size,
        }

    def text(self) -> str:
        """The text of ``pgtasks limits`` ("" when there is nothing to show)."""
        parts = []
        if self.debounced or self.enqueues_debounced:
            rows = [[r.task, r.jobs, r.replaced, r.most_replaced] for r in self.debounced]
            parts.append(
                format_table(("DEBOUNCED TASK", "PENDING", "REPLACED", "MOST REPLACED"), rows)
                + f"\nenqueues that replaced a pending job (all time): {self.enqueues_debounced}"
            )
        if self.batches or self.batches_run:
            rows = [[r.task, r.max_size, f"{r.max_wait:g} s"] for r in self.batches]
            mean = self.mean_batch_size
            parts.append(
                format_table(("BATCH TASK", "MAX SIZE", "MAX WAIT"), rows)
                + f"\nbatches run: {self.batches_run}, jobs in them: {self.batch_jobs}"
                + (f", mean size {mean:.1f}" if mean is not None else "")
            )
        return "\n\n".join(parts)


def batch_tasks(tasks: Iterable[Task[Any, Any]]) -> tuple[BatchTask, ...]:
    unique = {task.name: task for task in tasks if task.batch is not None}
    return tuple(
        BatchTask(name, task.batch.max_size, task.batch.max_wait.total_seconds())
        for name, task in sorted(unique.items())
        if task.batch is not None
    )


def read_flow(
    queries: OperatorsPort, conn: psycopg.Connection[Any], tasks: Iterable[Task[Any, Any]]
) -> FlowStats:
    debounced = tuple(
        DebouncedTask(row["task_name"], row["jobs"], row["replaced"], row["most_replaced"])
        for row in queries.debounce_stats(conn)
    )
    counters = queries.get_counters(conn)
    return FlowStats(
        debounced,
        batch_tasks(tasks),
        enqueues_debounced=int(counters.get(ENQUEUES_DEBOUNCED, 0)),
        batches_run=int(counters.get(BATCHES_RUN, 0)),
        batch_jobs=int(counters.get(BATCH_JOBS, 0)),
    )


def flow_stats(app: App) -> FlowStats:
    """:func:`read_flow` on the app's connections (the replica when it has one)."""
    return app.database.read(lambda conn: read_flow(app.queries, conn, app.tasks.values()))
