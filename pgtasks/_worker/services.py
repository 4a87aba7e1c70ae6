"""Background services of a worker: Heartbeat, Rescuer and Listener.

Each runs in its own thread on its own dedicated connection (never the app's pool, so a
task that exhausts or leaks pooled connections cannot stop heartbeats or rescue). A
service that meets a database error logs it (at a bounded rate), drops its connection
and tries again with capped backoff; it never dies while the worker runs.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import random
import threading
import time
from typing import TYPE_CHECKING, Any

import psycopg

if TYPE_CHECKING:
    from .worker import Worker

logger = logging.getLogger("pgtasks.worker")

#: Session settings of a worker's own connections. Queue tables' statistics are always
#: stale (a bulk enqueue of thousands of jobs is "15 rows" until autovacuum analyzes it),
#: so keep the planner on index scans: a stale estimate must never turn the claim into a
#: bitmap scan that sorts every pending row (4 ms instead of 0.1 ms at 20k pending). Every
#: statement of these connections is an indexed lookup by design, written so that its
#: plan does not depend on its parameters (partial-index predicates are literals; the
#: optional queue and task filters are plain filters). So each statement is planned once
#: per connection (a generic plan for psycopg's prepared statements): planning the claim
#: and the finish anew on every round trip cost ~0.4 ms of server time per exchange.
#: tests/integration/test_claim_plan.py checks the generic plans.
WORKER_CONNECTION_OPTIONS = (
    "-c plan_cache_mode=force_generic_plan -c enable_bitmapscan=off -c enable_seqscan=off"
)

#: Seconds between repeated log lines about one continuing database problem.
ERROR_LOG_INTERVAL = 10.0
MAX_BACKOFF = 2.0


def connect(worker: Worker) -> psycopg.Connection[Any]:
    """A dedicated autocommit connection with TCP keepalives (dead peers are noticed)."""
    return psycopg.connect(
        worker.app.dsn,
        autocommit=True,
        connect_timeout=max(1, round(worker.app.connect_timeout)),
        keepalives=1,
        keepalives_idle=5,
        keepalives_interval=2,
        keepalives_count=3,
        application_name=f"pgtasks worker {worker.name}",
        options=WORKER_CONNECTION_OPTIONS,
    )


class ErrorLog:
    """Logs a continuing failure once, then at most every ERROR_LOG_INTERVAL seconds."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.failing_since: float | None = None
        self.last_logged = 0.0

    def failed(self, error: BaseException) -> None:
        now = time.monotonic()
        if self.failing_since is None:
            self.failing_since = now
        if now - self.last_logged >= ERROR_LOG_INTERVAL:
            self.last_logged = now
            logger.warning(
                "%s: database error (%s), retrying: %s",
                self.what,
                type(error).__name__,
                str(error).strip().splitlines()[0] if str(error).strip() else "",
            )

    def recovered(self) -> None:
        if self.failing_since is not None:
            logger.info(
                "%s: database reachable again after %.1f s",
                self.what,
                time.monotonic() - self.failing_since,
            )
        self.failing_since = None
        self.last_logged = 0.0


class Service(abc.ABC):
    """A loop that calls ``run_once(conn)`` every ``interval`` seconds (with jitter)."""

    name = "service"

    def __init__(self, worker: Worker, interval: float) -> None:
        self.worker = worker
        self.interval = interval
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"pgtasks-{self.name}", daemon=True)
        self.errors = ErrorLog(f"{self.name} of worker {worker.name}")
        self.conn: psycopg.Connection[Any] | None = None
        #: time.monotonic() of the last successful run_once (for health checks).
        self.last_success = 0.0

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout)

    @abc.abstractmethod
    def run_once(self, conn: psycopg.Connection[Any]) -> None:
        """One pass of the service's work."""

    def _next_wait(self) -> float:
        return self.interval * random.uniform(0.9, 1.1)  # noqa: S311 - spreading load only

    def _run(self) -> None:
        failures = 0
        wait = self._next_wait()
        while not self.stopping.wait(wait):
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = connect(self.worker)
                self.run_once(self.conn)
            except psycopg.Error as error:
                failures += 1
                self.errors.failed(error)
                self._drop_connection()
                wait = min(MAX_BACKOFF, 0.1 * 2**failures)
                continue
            except Exception:
                failures += 1
                logger.exception("%s of worker %s failed; continuing", self.name, self.worker.name)
                wait = min(MAX_BACKOFF, 0.1 * 2**failures)
                continue
            failures = 0
            self.errors.recovered()
            self.last_success = time.monotonic()
            wait = self._next_wait()
        self._drop_connection()

    def _drop_connection(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()


class Heartbeat(Service):
    """Refreshes the worker's heartbeat; re-registers when the registration was removed."""

    name = "heartbeat"

    def run_once(self, conn: psycopg.Connection[Any]) -> None:
        self.worker.heartbeat(conn)
        self.worker.poll_cancel_requests(conn)


class Rescuer(Service):
    """Returns jobs of dead workers to pending (or failed when out of attempts)."""

    name = "rescuer"

    def run_once(self, conn: psycopg.Connection[Any]) -> None:
        # Beat our own heart first: after an outage longer than the lease we would
        # otherwise rescue the jobs we are still running.
        self.worker.heartbeat(conn)
        self.worker.rescue(conn)


class Listener(Service):
    """LISTENs for enqueue notifications and wakes the claim loop for its queues.

    After (re)connecting it wakes the loop once, so jobs enqueued while it was away are
    claimed at once rather than at the next poll.
    """

    name = "listener"

    def __init__(self, worker: Worker) -> None:
        super().__init__(worker, interval=0.0)

    def _next_wait(self) -> float:
        return 0.0

    def run_once(self, conn: psycopg.Connection[Any]) -> None:
        store = self.worker.app.store
        store.listen(conn, store.channel, store.cancel_channel)
        self.worker.wake(notified=True)
        self.errors.recovered()
        self.last_success = time.monotonic()
        queues = self.worker.queues
        while not self.stopping.is_set():
            for notify in conn.notifies(timeout=0.2):
                if notify.channel == store.cancel_channel:
                    if notify.payload.isascii() and notify.payload.isdigit():
                        self.worker.cancel_jobs({int(notify.payload)})
                elif queues is None or notify.payload in queues:
                    self.worker.wake(notified=True)
            self.last_success = time.monotonic()
