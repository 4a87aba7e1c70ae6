"""Admin (``app.admin``): the operator reads and writes shared by ``pgtasks
stats|jobs|workers|queues`` and ``pgtasks web``: stats, workers, queues and limits, hosts
paused, queues moved between stores; and, from :class:`~pgtasks._app.repairs.Repairs`,
the writes on jobs (retry, cancel, delete, purge). (The dashboard's own reads are in
``pgtasks.web.reads``.)

Each App holds one, built from its routing (the App of a store, a queue, an id: any
:class:`AdminView`); it never imports App. Its statements run through the database of
the App of their store (a pooled connection, broken connections retried) and it returns
values from ``pgtasks._operations``. Reads that may lag take ``replica=True`` (the
dashboard, ``pgtasks stats``, ``pgtasks jobs list``): they run on the app's replica when
it has one (``Database.read``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import psycopg

from .._counters import every_counter
from .._durable_text import parked_by_queue
from .._errors import ConfigurationError, DatabaseError
from .._limits import LimitState, describe_limit, limit_states
from .._operations import QueueStats, Stats, WorkerInfo
from .._payload import check_name
from .._queues import QueueState, queue_states
from .._running import (
    ARGUMENT_CHARS,
    LAST_JOBS,
    RUNNING_SHOWN,
    FinishedJob,
    RunningJob,
)
from .repairs import Repairs, port
from .routing import RoutedTask, StoreView

if TYPE_CHECKING:
    from .._store.ports import AdminPort


class Queued(Protocol):
    """A schedule, as the operators' reads see it: the queue of its jobs (None: its
    task's)."""

    @property
    def queue(self) -> str | None: ...


class AdminView(StoreView, Protocol):
    """What the operators' reads and writes take of the App of one store."""

    @property
    def lease_timeout(self) -> float: ...

    @property
    def default_queue(self) -> str: ...

    @property
    def tasks(self) -> Mapping[str, RoutedTask]: ...

    @property
    def schedules(self) -> Mapping[str, Queued]: ...

    def pause_queue(self, queue: str) -> bool: ...

    def resume_queue(self, queue: str) -> bool: ...


V = TypeVar("V", bound=AdminView)


#: Removed workers the overview and workers page list (seconds since removal).
WORKER_HISTORY = 3600.0


def limits_unreadable(error: psycopg.Error) -> DatabaseError:
    """The error to show when the limits cannot be read: the reason, and what to run."""
    return DatabaseError(
        "the limits cannot be read"
        f" ({type(error).__name__}: {' '.join(str(error).split())}); `pgtasks doctor`"
        " checks the limits table, `pgtasks migrate` repairs a schema that is behind"
    )


@dataclasses.dataclass(frozen=True)
class QueueMove:
    """How a ``queues move`` ended: ``left`` unfinished jobs of the queue in the source
    store (0: drained, and the queue resumed in the target store)."""

    queue: str
    source: str
    target: str
    left: int

    @property
    def done(self) -> bool:
        return self.left == 0


class Admin(Repairs[V]):
    """The operator reads and writes of one App (``routing.here``, V: any
    :class:`AdminView`): its own reads and, from Repairs, the writes on jobs; a job id is
    acted on in the store that issued it, a host in every store the App serves."""

    # -- reads ----------------------------------------------------------------------------
    def read_workers(
        self, conn: psycopg.Connection[Any], *, since: float, owner: V | None = None
    ) -> tuple[datetime, list[WorkerInfo]]:
        """The database's now and the workers ``pgtasks workers --since`` lists (of
        ``owner``'s store; default this App's)."""
        app = self.here if owner is None else owner
        rows = port(app).list_workers(conn, since=since)
        now = rows[0]["now"] if rows else port(app).get_database_time(conn)
        return now, [WorkerInfo.from_row(row, lease_timeout=app.lease_timeout) for row in rows]

    def read_running(self, conn: psycopg.Connection[Any]) -> list[RunningJob]:
        """What runs where: the running jobs with their task, arguments (cut, escaped),
        attempt, runtime and host."""
        rows = port(self.here).list_running_jobs(conn, limit=RUNNING_SHOWN, chars=ARGUMENT_CHARS)
        return [RunningJob.from_row(row) for row in rows]

    def read_last_jobs(
        self, conn: psycopg.Connection[Any], worker_ids: Sequence[int]
    ) -> list[FinishedJob]:
        """The last jobs each of ``worker_ids`` ran (an index probe per worker)."""
        rows = port(self.here).list_recent_worker_jobs(conn, worker_ids, per_worker=LAST_JOBS)
        return [FinishedJob.from_row(row) for row in rows]

    def pause_host(self, hostname: str, *, pause: bool = True) -> bool:
        """Pause (or resume) every worker of ``hostname`` in every store the App serves:
        none claims from its next read of the paused queues on (at most
        ``paused_refresh``, a second, or at once on a NOTIFY); running jobs finish.
        Whether that changed any store."""
        check_name("hostname", hostname)
        changed = False
        for owner in self.routing.serving():
            store = port(owner)

            def switch(conn: psycopg.Connection[Any], store: AdminPort = store) -> bool:
                return bool(
                    store.pause_host(conn, hostname) if pause else store.resume_host(conn, hostname)
                )

            changed |= owner.database.run(switch)
        return changed

    def paused_hosts(self) -> list[str]:
        """The hosts whose workers are paused (in any store the App serves)."""
        names: set[str] = set()
        for owner in self.routing.serving():
            rows = owner.database.run(port(owner).get_paused_hosts)
            names.update(row["hostname"] for row in rows)
        return sorted(names)

    def collect_stats(self, conn: psycopg.Connection[Any]) -> Stats:
        """What ``pgtasks stats`` shows (exact counts: it reads every row)."""
        app, store = self.here, port(self.here)
        queues = [QueueStats.from_row(row) for row in store.get_queue_stats(conn)]
        now, workers = self.read_workers(conn, since=0.0)
        return Stats(
            now=now,
            queues=queues,
            live_workers=sum(worker.state == "live" for worker in workers),
            silent_workers=sum(worker.state == "silent" for worker in workers),
            lease_timeout=app.lease_timeout,
            unknown_tasks=store.get_unknown_task_jobs(conn, lease_timeout=app.lease_timeout),
            counters=every_counter(store.get_counters(conn)),
            parked=parked_by_queue(store.count_parked_jobs(conn)),
            flow=store.count_keyed(conn),
        )

    def queue_in_use(self, queue: str) -> bool:
        """Whether anything uses ``queue``: a task or schedule of the app declares it, a
        job of its store is unfinished in it, or a live worker names it in its queues.
        (Pausing a queue nothing uses is allowed; ``pgtasks queues pause`` says so, a typo
        perhaps.)"""
        app = self.here
        if queue == app.default_queue or any(task.queue == queue for task in app.tasks.values()):
            return True
        if any(schedule.queue == queue for schedule in app.schedules.values()):
            return True
        owner = self.routing.for_queue(queue)

        def read(conn: psycopg.Connection[Any]) -> bool:
            if any(row["queue"] == queue for row in port(owner).get_unfinished_stats(conn)):
                return True
            _, workers = self.read_workers(conn, since=0.0, owner=owner)
            return any(
                worker.state == "live" and worker.queues is not None and queue in worker.queues
                for worker in workers
            )

        return owner.database.run(read)

    def counters(self) -> dict[str, int]:
        """How often the guarantees were exercised since the schema was created, every
        process (pgtasks._counters): every counter's total, by name (0 when never
        counted)."""
        return every_counter(self.here.database.run(port(self.here).get_counters))

    def queues(self) -> list[QueueState]:
        """What ``pgtasks queues list`` shows: every known queue (declared by a task, with
        unfinished jobs, or paused), its pending, due and running jobs, and whether it is
        paused. Counts come from indexes only (no finished row is read)."""
        declared = {task.queue for task in self.here.tasks.values()}
        store = port(self.here)

        def read(conn: psycopg.Connection[Any]) -> list[QueueState]:
            limits = {
                row["name"].removeprefix("queue:"): describe_limit(row)
                for row in store.get_limits(conn)
                if row["name"].startswith("queue:")
            }
            return queue_states(
                store.get_unfinished_stats(conn), store.get_paused_queues(conn), declared, limits
            )

        return self.here.database.run(read)

    def read_limits(self, conn: psycopg.Connection[Any], *, top_keys: int = 10) -> list[LimitState]:
        """Every limit as operators read it (``pgtasks limits``, the dashboard), on
        ``conn``: per limit its kind (queue, task or key) and target, its capacity
        (concurrency), its rate with the bucket's tokens now, burst and the seconds until
        the next whole token, the jobs running under it now, its pending and due jobs and
        those it holds back (due but no room or no token), and for a per-key limit the keys
        with jobs and the ``top_keys`` busiest (running, pending, due and held per key);
        then the limits jobs name that are not stored (``stored`` False). Counts are read
        without SKIP LOCKED. Raises the driver's error (see :meth:`limits` for the one a
        CLI shows)."""
        store = port(self.here)
        return limit_states(
            store.get_limits(conn),
            store.get_limit_usage(conn),
            store.get_limit_top_keys(conn, per_limit=top_keys),
        )

    def limits(self, *, top_keys: int = 10) -> list[LimitState]:
        """:meth:`read_limits` on the app's connections (the replica when it has one: the
        counts may lag by its replay). A table that cannot be read raises DatabaseError
        with the reason (never a driver traceback)."""
        try:
            return self.here.database.read(lambda conn: self.read_limits(conn, top_keys=top_keys))
        except psycopg.Error as error:
            raise limits_unreadable(error) from None

    def unfinished_in(self, queue: str, owner: V | None = None) -> int:
        """Waiting, pending and running jobs of ``queue`` in ``owner``'s store (default
        this App's)."""
        app = self.here if owner is None else owner
        rows = app.database.run(port(app).count_stranded_jobs)
        return sum(int(row["jobs"]) for row in rows if row["queue"] == queue)

    def move_queue(
        self,
        queue: str,
        target: str,
        *,
        source: str | None = None,
        timeout: float = 600.0,
        poll: float = 1.0,
        waiting: Callable[[int], None] | None = None,
    ) -> QueueMove:
        """Move ``queue`` from store ``source`` (default: where it routes now) to
        ``target``: pause it in ``target`` (jobs enqueued there once the route is switched
        wait, so none overtakes an older one), wait until ``source`` holds none of its jobs
        (its workers run them; the producers' route is switched meanwhile), then resume it
        in ``target``. ``waiting(left)`` is told the count while it waits. After
        ``timeout`` seconds: the count left, the queue still paused in ``target`` (run it
        again to keep waiting)."""
        check_name("queue", queue)
        stores = self.routing.stores
        stores.layout.check_store(target)
        source = source if source is not None else stores.store_of_queue(queue)
        stores.layout.check_store(source)
        if source == target:
            raise ConfigurationError(
                f"queue {queue!r} routes to store {target!r} already: name the store it"
                " leaves with --from"
            )
        to_app, from_app = self.routing.for_store(target), self.routing.for_store(source)
        to_app.pause_queue(queue)
        deadline = time.monotonic() + timeout
        while True:
            left = self.unfinished_in(queue, from_app)
            if left == 0:
                to_app.resume_queue(queue)
                return QueueMove(queue, source, target, 0)
            if time.monotonic() >= deadline:
                return QueueMove(queue, source, target, left)
            if waiting is not None:
                waiting(left)
            time.sleep(min(poll, max(deadline - time.monotonic(), 0.0)))
