"""WorkerSettings: a worker's configuration as one frozen value, derived from its App's.

The options are declared once, in :class:`WorkerOptions`: ``Worker(app, queues,
**options)``, :meth:`WorkerSettings.derive` and ``pgtasks worker`` (cli/worker.py, whose
options map onto these names) take them; each is a field of :class:`WorkerSettings` or of
its :class:`~pgtasks._execution.settings.ExecutorSettings`, where its default lives.
What is not given comes from the App's settings (the lease, heartbeat, rescue and poll
intervals; pruning and healing), and every rule that joins two options is checked once,
here. The worker's parts receive it (or the part of it they use) and never look at the
App's configuration again; the Worker shows some of it as attributes (:class:`Setting`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from typing_extensions import Unpack

from .._app.settings import AppSettings
from .._app.settings import Setting as Setting  # the Worker's read-only attributes
from .._errors import ConfigurationError
from .._execution.settings import ExecutorSettings
from .._payload import check_name
from .._validation import seconds_at_least_zero, whole_number


class WorkerOptions(TypedDict, total=False):
    """The keywords of ``Worker(app, queues, ...)`` beside ``observers``, each a field of
    :class:`WorkerSettings` or of its ``executor``; one not given is its default:

    - ``concurrency`` = ``10``: jobs run at once (threads and the event loop);
    - ``lease_timeout`` = ``None``: seconds without heartbeat before a worker's jobs are
      rescued (None: the App's);
    - ``heartbeat_interval`` = ``None``: seconds between heartbeats (None: the App's);
    - ``rescue_interval`` = ``None``: seconds between rescue passes (None: the App's);
    - ``poll_interval`` = ``None``: seconds between claims when no notification arrives
      (None: the App's);
    - ``shutdown_timeout`` = ``30.0``: seconds running jobs get to finish on a stop;
    - ``ignore_unknown`` = ``True``: kept for compatibility (a worker claims only the
      tasks it knows);
    - ``prefetch`` = ``None``: jobs claimed beyond the free slots (None: two per slot
      while the jobs are short);
    - ``pool`` = ``'thread'``: the executor of sync tasks that name none (or
      ``"process"``);
    - ``processes`` = ``None``: the process pool's size (None: the number of CPUs);
    - ``queue_executors`` = ``{}``: a queue's executor of sync tasks, e.g.
      ``{"cpu": "process"}``;
    - ``process_start_method`` = ``'spawn'``: how pool children start (or ``"fork"``);
    - ``app_path`` = ``None``: the ``module:attribute`` spawned children import;
    - ``max_tasks_per_child`` = ``None``: replace a pool child after this many jobs;
    - ``max_memory_per_child`` = ``None``: megabytes of resident memory after a job above
      which a child is replaced;
    - ``loop_lag_threshold`` = ``0.5``: seconds the event loop may be blocked before a
      warning (None or 0: off);
    - ``store`` = ``None``: the store served (None: the one its queues route to);
    - ``job_logs`` = ``True``: capture the attempts' log lines from INFO, from a level
      (``"DEBUG"``), or not (False);
    - ``min_concurrency`` = ``None``, ``max_concurrency`` = ``None``: the bounds
      ``pool_shrink``/``pool_grow`` resize the pool within (None: 1 and ``concurrency``).
    """

    concurrency: int
    #: The four intervals: None (not given) is the App's.
    lease_timeout: float | None
    heartbeat_interval: float | None
    rescue_interval: float | None
    poll_interval: float | None
    shutdown_timeout: float
    ignore_unknown: bool
    prefetch: int | None
    pool: str
    processes: int | None
    queue_executors: Mapping[str, str] | None
    process_start_method: str
    app_path: str | None
    max_tasks_per_child: int | None
    max_memory_per_child: float | None
    loop_lag_threshold: float | None
    store: str | None
    job_logs: bool | str | int
    min_concurrency: int | None
    max_concurrency: int | None


#: The options of WorkerOptions that make its ExecutorSettings.
EXECUTOR_OPTIONS = tuple(
    field.name
    for field in dataclasses.fields(ExecutorSettings)
    if field.init and field.name in WorkerOptions.__optional_keys__
)
#: The intervals that are the App's when not given.
APP_INTERVALS = ("lease_timeout", "heartbeat_interval", "rescue_interval", "poll_interval")


def refuse_unknown(function: str, options: Mapping[str, object]) -> None:
    """The TypeError Python raises for a keyword ``function`` does not take, for the
    first given that is not one of WorkerOptions."""
    for name in options:
        if name not in WorkerOptions.__optional_keys__:
            raise TypeError(f"{function}() got an unexpected keyword argument {name!r}")


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
        **options: Unpack[WorkerOptions],
    ) -> WorkerSettings:
        """The settings of ``Worker(app, ...)``'s keywords (:class:`WorkerOptions`): an
        interval not given is the App's; queue names are stripped, blank ones dropped."""
        refuse_unknown("WorkerSettings.derive", options)
        if queues is not None:
            queues = [queue_name.strip() for queue_name in queues if queue_name.strip()]
        given: dict[str, Any] = dict(options)
        executor_options = {name: given.pop(name) for name in EXECUTOR_OPTIONS if name in given}
        if "queue_executors" in executor_options:
            executor_options["queue_executors"] = dict(executor_options["queue_executors"] or {})
        executor = ExecutorSettings(**executor_options)
        for name in APP_INTERVALS:
            if given.get(name) is None:
                given[name] = getattr(app, name)
        store = given.pop("store", None)
        return cls(
            executor=executor,
            queues=tuple(queues) if queues is not None else None,
            prune_interval=app.prune_interval,
            prune_done_after=app.prune_done_after,
            prune_failed_after=app.prune_failed_after,
            heal_interval=app.heal_interval,
            max_error_bytes=app.max_error_bytes,
            priority_aging=app.priority_aging,
            store=app.store_layout.store_of_queues(
                store if store is not None else app.store, queues
            ),
            **given,
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


def option_default(name: str) -> Any:
    """The default of option ``name`` of WorkerOptions: its field's in WorkerSettings or
    ExecutorSettings (``pgtasks worker`` shows it)."""
    owner = ExecutorSettings if name in EXECUTOR_OPTIONS else WorkerSettings
    field = next(field for field in dataclasses.fields(owner) if field.name == name)
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def listed(queues: tuple[str, ...] | None) -> list[str] | None:
    """The queues as a list (a copy; None: every queue)."""
    return list(queues) if queues is not None else None
