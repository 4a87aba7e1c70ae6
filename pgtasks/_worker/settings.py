"""WorkerSettings: a worker's configuration as one frozen value, derived from its App's.

``Worker(app, ...)``'s keywords, or ``pgtasks worker``'s options, make it with
:meth:`WorkerSettings.derive`: what is not given comes from the App's settings (the
lease, heartbeat, rescue and poll intervals; pruning and healing), and every rule that
joins two options is checked once, here. The worker's parts receive it (or the part of
it they use) and never look at the App's configuration again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import cast

from .._app.settings import AppSettings
from .._errors import ConfigurationError
from .._execution.settings import ExecutorSettings, PoolName, StartMethod
from .._payload import check_name
from .._validation import seconds_at_least_zero, whole_number


@dataclasses.dataclass(frozen=True)
class WorkerSettings:
    """What a worker runs with (see :class:`pgtasks.Worker` for each option).

    ``queues``: the queues it claims from (None: every queue of its store); ``store``:
    the store it serves (None: the one its queues route to; see pgtasks/_app/layout.py);
    ``executor``: how it runs jobs (its ``concurrency`` among them). The intervals are in
    seconds; the pruning and healing options and ``max_error_bytes`` are the App's.
    """

    executor: ExecutorSettings
    queues: tuple[str, ...] | None = None
    lease_timeout: float = 30.0
    heartbeat_interval: float = 5.0
    rescue_interval: float = 5.0
    poll_interval: float = 1.0
    shutdown_timeout: float = 30.0
    #: Kept for compatibility: a worker always claims only the tasks it knows.
    ignore_unknown: bool = True
    #: Jobs claimed beyond the free slots (None: two per slot while jobs are short).
    prefetch: int | None = None
    prune_interval: float = 60.0
    prune_done_after: float | None = 86400.0
    prune_failed_after: float | None = 7 * 86400.0
    heal_interval: float = 30.0
    max_error_bytes: int = 64 * 1024
    store: str | None = None
    #: The bounds of the pool's size at runtime (pool.py; None: 1 and ``concurrency``).
    min_concurrency: int | None = None
    max_concurrency: int | None = None
    #: The App's priority_aging: seconds per level a due job's priority rises (None: none).
    priority_aging: float | None = None
    #: The queues with an aging interval of their own (app.queue(name, priority_aging=)).
    queue_aging: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        if self.queues is not None:
            if not self.queues:
                raise ConfigurationError("queues= must name at least one queue (or be None)")
            for queue_name in self.queues:
                try:
                    check_name("queue", queue_name)
                except ValueError as error:
                    raise ConfigurationError(f"queues=: {error}") from None
        for name in (
            "lease_timeout",
            "heartbeat_interval",
            "rescue_interval",
            "poll_interval",
            "shutdown_timeout",
        ):
            object.__setattr__(self, name, seconds_at_least_zero(f"{name}=", getattr(self, name)))
        if self.heartbeat_interval >= self.lease_timeout:
            raise ConfigurationError(
                f"heartbeat_interval ({self.heartbeat_interval:g} s) must be shorter than"
                f" lease_timeout ({self.lease_timeout:g} s)"
            )
        if self.prefetch is not None:
            whole_number("prefetch=", self.prefetch, minimum=0)
        low, high = self.pool_bounds
        whole_number("min_concurrency=", low, minimum=1)
        whole_number("max_concurrency=", high, minimum=1)
        if not low <= self.concurrency <= high:
            raise ConfigurationError(
                f"the pool's bounds must hold its concurrency: min_concurrency={low} <="
                f" concurrency={self.concurrency} <= max_concurrency={high}"
            )

    @property
    def pool_bounds(self) -> tuple[int, int]:
        """The least and most local slots a resize at runtime may give the pool."""
        low = self.min_concurrency if self.min_concurrency is not None else 1
        high = self.max_concurrency if self.max_concurrency is not None else self.concurrency
        return low, high

    @classmethod
    def derive(
        cls,
        app: AppSettings,
        queues: Sequence[str] | None = None,
        *,
        concurrency: int = 10,
        lease_timeout: float | None = None,
        heartbeat_interval: float | None = None,
        rescue_interval: float | None = None,
        poll_interval: float | None = None,
        shutdown_timeout: float = 30.0,
        ignore_unknown: bool = True,
        prefetch: int | None = None,
        pool: str = "thread",
        processes: int | None = None,
        queue_executors: Mapping[str, str] | None = None,
        process_start_method: str = "spawn",
        app_path: str | None = None,
        max_tasks_per_child: int | None = None,
        max_memory_per_child: float | None = None,
        loop_lag_threshold: float | None = 0.5,
        store: str | None = None,
        min_concurrency: int | None = None,
        max_concurrency: int | None = None,
        job_logs: bool | str | int = True,
    ) -> WorkerSettings:
        """The settings of ``Worker(app, ...)``'s keywords: an interval not given is the
        App's; queue names are stripped, blank ones dropped."""
        if queues is not None:
            queues = [queue_name.strip() for queue_name in queues if queue_name.strip()]
        executor = ExecutorSettings(
            concurrency=concurrency,
            pool=cast(PoolName, pool),
            processes=processes,
            queue_executors=cast("dict[str, PoolName]", dict(queue_executors or {})),
            process_start_method=cast(StartMethod, process_start_method),
            app_path=app_path,
            max_tasks_per_child=max_tasks_per_child,
            max_memory_per_child=max_memory_per_child,
            loop_lag_threshold=loop_lag_threshold,
            job_logs=job_logs,
        )
        return cls(
            executor=executor,
            queues=tuple(queues) if queues is not None else None,
            lease_timeout=_given(lease_timeout, app.lease_timeout),
            heartbeat_interval=_given(heartbeat_interval, app.heartbeat_interval),
            rescue_interval=_given(rescue_interval, app.rescue_interval),
            poll_interval=_given(poll_interval, app.poll_interval),
            shutdown_timeout=shutdown_timeout,
            ignore_unknown=ignore_unknown,
            prefetch=prefetch,
            prune_interval=app.prune_interval,
            prune_done_after=app.prune_done_after,
            prune_failed_after=app.prune_failed_after,
            heal_interval=app.heal_interval,
            max_error_bytes=app.max_error_bytes,
            priority_aging=app.priority_aging,
            store=app.store_layout.store_of_queues(
                store if store is not None else app.store, queues
            ),
            min_concurrency=min_concurrency,
            max_concurrency=max_concurrency,
        )

    @property
    def concurrency(self) -> int:
        """Jobs run at once on threads and the event loop."""
        return self.executor.concurrency

    @property
    def paused_refresh(self) -> float:
        """Seconds between reads of the paused queues (and, without LISTEN, of
        cancellations): half the poll interval, at least 50 ms."""
        return max(0.05, self.poll_interval / 2)


def _given(value: float | None, default: float) -> float:
    return default if value is None else value


class SettingsAttributes:
    """A worker's settings as the attributes of earlier releases (``worker.queues``,
    ``worker.poll_interval``, ...), read from its ``settings``."""

    settings: WorkerSettings

    @property
    def queues(self) -> list[str] | None:
        """The queues this worker claims from (None: every queue)."""
        queues = self.settings.queues
        return list(queues) if queues is not None else None

    @property
    def concurrency(self) -> int:
        return self.settings.concurrency

    @property
    def lease_timeout(self) -> float:
        return self.settings.lease_timeout

    @property
    def heartbeat_interval(self) -> float:
        return self.settings.heartbeat_interval

    @property
    def rescue_interval(self) -> float:
        return self.settings.rescue_interval

    @property
    def poll_interval(self) -> float:
        return self.settings.poll_interval

    @property
    def shutdown_timeout(self) -> float:
        return self.settings.shutdown_timeout

    @property
    def ignore_unknown(self) -> bool:
        return self.settings.ignore_unknown

    @property
    def prefetch(self) -> int | None:
        """Jobs claimed beyond the free slots (None: see claims.Prefetch)."""
        return self.settings.prefetch
