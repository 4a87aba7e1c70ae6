"""A Worker's round trips: write outcomes and claim jobs (a mixin of Worker).

Each round trip writes the finished outcomes (fenced by their leases) and claims up to
the free slots, in one transaction (Store.finish_and_claim_jobs). While jobs keep the
worker busy, a second round trip runs on its own connection (_exchange.py); the loop
thread prepares both and applies their results, so all state stays on that thread.
Claims read on from the worker's position (see docs/explanation/claim-and-rescue.md).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import psycopg

from .._execution.executor import ClaimedJob
from .._store.store import ClaimPosition, claim_position
from .background import Exchange, OutcomeRow
from .shutdown import SHUTDOWN_WRITE_BOUND

if TYPE_CHECKING:
    from .._app.app import App
    from .._execution.executor import Executor, Running
    from .._retry import Outcome
    from .background import BackgroundExchanger
    from .services import ErrorLog

logger = logging.getLogger("pgtasks.worker")

#: A claim that reads the pending index from its start runs at most once per poll
#: interval, and no more often than every FULL_CLAIM_SHARE times its own duration (so
#: at most 1/20 of the loop's time), nor more rarely than every MAX_FULL_CLAIM_SPACING s.
FULL_CLAIM_SHARE = 20.0
MAX_FULL_CLAIM_SPACING = 30.0


class WorkerExchange:
    """Round trips of :class:`~pgtasks.Worker` (which provides the state below)."""

    if TYPE_CHECKING:
        app: App
        name: str
        queues: list[str] | None
        prefetch: int
        poll_interval: float
        ignore_unknown: bool

        @property
        def worker_id(self) -> int | None: ...

        _executor: Executor
        _in_flight: dict[int, Running]
        _unwritten: list[tuple[Running, Outcome]]
        _task_names: list[str] | None
        _position: ClaimPosition | None
        _next_full_claim: float
        _background: BackgroundExchanger | None
        _claiming: int
        _maybe_more: bool
        _recover_needed: bool
        _background_rest_until: float
        _errors: ErrorLog

        def _connection(self) -> psycopg.Connection[Any]: ...
        def _count(self, name: str, amount: int = 1) -> None: ...
        def _notify(self, event: str, *arguments: Any) -> None: ...
        def _after_write(
            self, batch: list[tuple[Running, Outcome]], accepted: dict[int, str]
        ) -> None: ...

    def _exchange(self, limit: int) -> int:
        """Write finished outcomes and claim up to ``limit`` jobs in one round trip."""
        exchange = self._prepare_exchange(limit)
        try:
            self._run_exchange(self._connection(), exchange)
        except BaseException:
            self._unwritten = exchange.batch + self._unwritten
            raise
        return self._apply_exchange(exchange)

    def _prepare_exchange(self, limit: int) -> Exchange:
        """Take the unwritten outcomes into a round trip that claims up to ``limit`` jobs."""
        batch, self._unwritten = self._unwritten, []
        by_owner: dict[int, list[OutcomeRow]] = {}
        for running, outcome in batch:
            by_owner.setdefault(running.job.worker_id, []).append(
                self._outcome_row(running, outcome)
            )
        return Exchange(
            batch=batch,
            finished=list(by_owner.items()),
            limit=limit,
            after=self._claim_from() if limit else None,
            task_names=self._known_task_names() if self.ignore_unknown else None,
        )

    def _run_exchange(self, conn: psycopg.Connection[Any], exchange: Exchange) -> None:
        """The round trip itself (on the loop's or the background thread): no state."""
        worker_id = self.worker_id
        if worker_id is None:
            raise RuntimeError("the worker is not registered")
        exchange.owner = worker_id
        started = time.monotonic()
        exchange.accepted, exchange.rows = self.app.store.finish_and_claim_jobs(
            conn,
            finished=exchange.finished,
            worker_id=worker_id,
            queues=self.queues,
            limit=exchange.limit,
            task_names=exchange.task_names,
            after=exchange.after,
        )
        exchange.seconds = time.monotonic() - started

    def _apply_exchange(self, exchange: Exchange) -> int:
        """Log the written outcomes and start the claimed jobs (loop thread)."""
        rows = exchange.rows
        self._after_write(exchange.batch, exchange.accepted)
        if exchange.limit and exchange.after is None:
            self._full_claim_took(exchange.seconds)
        if exchange.limit:
            # Rows come back in claim order. An empty claim (idle, or nothing left past the
            # position) makes the next claim read from the start.
            self._position = claim_position(rows[-1]) if rows else None
        for row in rows:
            # The lease owner is the registration the claim ran under.
            job = ClaimedJob.from_row(row, exchange.owner)
            self._notify("job_started", job)
            running = self._executor.submit(job)
            self._in_flight[running.token] = running
        self._count("claimed", len(rows))
        return len(rows)

    def _can_overlap(self, now: float) -> bool:
        """Start the next round trip in the background? Only while jobs keep the worker
        busy (an idle worker's claim takes the shortest path) and the second connection
        is free and healthy."""
        return (
            self._background is not None
            and bool(self._in_flight or self._unwritten)
            and now >= self._background_rest_until
            and not self._background.busy
        )

    def _batch_more(self, limit: int) -> bool:
        """With a round trip in the background, is this one too small to start now?

        A second round trip pays off when it carries a real batch (a quarter of the
        worker's slots and prefetch, in outcomes to write and jobs to claim); a trickle
        waits for the one in flight to come back instead.
        """
        if self._background is None or not self._background.busy:
            return False
        batch = max(1, (self._executor.capacity + self.prefetch) // 4)
        return len(self._unwritten) + limit < batch

    def _take_background(self) -> None:
        """Apply the background round trip if it is back."""
        if self._background is None:
            return
        exchange = self._background.take()
        if exchange is None:
            return
        self._claiming = 0
        if exchange.error is None:
            claimed = self._apply_exchange(exchange)
            if exchange.limit:
                self._maybe_more = claimed == exchange.limit
            return
        # Not written: the outcomes go back to be written by the next round trip.
        self._unwritten = exchange.batch + self._unwritten
        self._maybe_more = True
        if exchange.broken:
            # Its claim may have committed with the reply lost: recover before claiming
            # again, and rest the second connection for a moment.
            self._errors.failed(exchange.error)
            self._recover_needed = True
            self._background_rest_until = time.monotonic() + 1.0

    def _settle_background(self, timeout: float = SHUTDOWN_WRITE_BOUND) -> None:
        """Wait for the background round trip (if any) and apply it."""
        if self._background is None:
            return
        if not self._background.wait(timeout):
            logger.warning(
                "worker %s: a background round trip did not return within %g s; leaving it",
                self.name,
                timeout,
            )
            return
        self._take_background()

    def _claim_from(self) -> ClaimPosition | None:
        """The position the next claim reads on from, or None to read from the start.

        From the start after an empty claim, and at least once per poll interval: a job
        that sorts before the position (run_at in the past, released or rescued while
        this worker went on) waits at most that long. While a claim from the start is
        slow (an old snapshot keeps the index entries of claimed jobs), the interval
        grows so that those claims take at most 1/FULL_CLAIM_SHARE of the loop's time.
        """
        now = time.monotonic()
        if self._position is None or now >= self._next_full_claim:
            self._next_full_claim = now + self.poll_interval
            return None
        return self._position

    def _full_claim_took(self, seconds: float) -> None:
        """Space the claims from the start by their cost (see _claim_from)."""
        spacing = min(MAX_FULL_CLAIM_SPACING, max(self.poll_interval, seconds * FULL_CLAIM_SHARE))
        self._next_full_claim = max(self._next_full_claim, time.monotonic() + spacing)

    def _known_task_names(self) -> list[str]:
        """The app's task names for --ignore-unknown claims, sorted once per change."""
        if self._task_names is None or len(self._task_names) != len(self.app.tasks):
            self._task_names = sorted(self.app.tasks)
        return self._task_names

    @staticmethod
    def _outcome_row(
        running: Running, outcome: Outcome
    ) -> tuple[int, int, str, str | None, str | None, float]:
        return (
            running.job.id,
            running.job.attempt,
            outcome.status,
            outcome.result_json,
            outcome.error,
            outcome.delay,
        )
