"""ExecutorSettings: how a worker runs its jobs, one frozen value checked once.

Part of a worker's settings (pgtasks/_worker/settings.py); see docs/howto/executors.md.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Literal

from .._errors import ConfigurationError
from .._validation import positive_number, whole_number
from .joblogs import DEFAULT_LEVEL, capture_level

StartMethod = Literal["spawn", "fork"]
START_METHODS: tuple[StartMethod, ...] = ("spawn", "fork")

PoolName = Literal["thread", "process"]
POOL_NAMES: tuple[PoolName, ...] = ("thread", "process")


@dataclasses.dataclass(frozen=True)
class ExecutorSettings:
    """How a worker runs its jobs (the executor-related ``Worker(...)`` options), checked
    once when made."""

    concurrency: int = 10
    #: The executor of sync tasks that name none (and whose queue names none).
    pool: PoolName = "thread"
    #: Size of the process pool (default: the number of CPUs).
    processes: int | None = None
    #: Default executor of sync tasks per queue, e.g. {"cpu": "process"}.
    queue_executors: Mapping[str, PoolName] = dataclasses.field(default_factory=dict)
    process_start_method: StartMethod = "spawn"
    #: ``module:attribute`` spawned children import (default: found from the app).
    app_path: str | None = None
    max_tasks_per_child: int | None = None
    #: Megabytes of resident memory after a job above which a child is replaced.
    max_memory_per_child: float | None = None
    #: Seconds of event-loop silence that log a blocking-call warning (None: off).
    loop_lag_threshold: float | None = 0.5
    #: Capture each attempt's log lines and store them with the job (see joblogs.py):
    #: True (from INFO), a level (``"DEBUG"``, ``logging.WARNING``) or False.
    job_logs: bool | str | int = True
    #: The lowest level captured (from ``job_logs``).
    job_log_level: int = dataclasses.field(default=DEFAULT_LEVEL, init=False)

    def __post_init__(self) -> None:
        whole_number("concurrency=", self.concurrency)
        level = capture_level(self.job_logs)
        object.__setattr__(self, "job_logs", level is not None)
        object.__setattr__(self, "job_log_level", level or DEFAULT_LEVEL)
        # A copy: the caller's dict may change later; 0 turns the lag warning off.
        object.__setattr__(self, "queue_executors", dict(self.queue_executors or {}))
        object.__setattr__(self, "loop_lag_threshold", self.loop_lag_threshold or None)
        for name in ("processes", "max_tasks_per_child"):
            if getattr(self, name) is not None:
                whole_number(f"{name}=", getattr(self, name))
        if self.pool not in POOL_NAMES:
            raise ConfigurationError(f"pool= must be 'thread' or 'process', got {self.pool!r}")
        for queue_name, executor in self.queue_executors.items():
            if executor not in POOL_NAMES:
                raise ConfigurationError(
                    f"queue_executors[{queue_name!r}] must be 'thread' or 'process', got"
                    f" {executor!r} (async def tasks always run on the event loop)"
                )
        if self.process_start_method not in START_METHODS:
            raise ConfigurationError(
                "process_start_method= must be 'spawn' or 'fork', got"
                f" {self.process_start_method!r}"
            )
        for name in ("max_memory_per_child", "loop_lag_threshold"):
            if getattr(self, name) is not None:
                positive_number(f"{name}=", getattr(self, name))
        if self.app_path is not None and (":" not in self.app_path or self.app_path[0] == ":"):
            raise ConfigurationError(
                f"app_path= must look like module:attribute, got {self.app_path!r}"
            )

    @property
    def sync_defaults(self) -> frozenset[PoolName]:
        """The executors a sync task that names none may run on (by its queue)."""
        return frozenset({self.pool, *self.queue_executors.values()})

    @property
    def pool_size(self) -> int:
        return self.processes or os.cpu_count() or 1
