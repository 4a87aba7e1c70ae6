"""A worker's round trips: write finished outcomes and claim jobs (Exchanges).

Each round trip writes the finished outcomes (fenced by their leases) and claims up to
the free slots, in one transaction (Queries.finish_and_claim_jobs). While jobs keep the
worker busy, round trips run off the loop thread, on LANES background lanes of their own
connection each (background.py), and each claims at most its share of the worker's slots
and prefetch: while one lane's round trip is on the server, the jobs the other one
claimed run, so neither the jobs nor the server wait for each other. The loop thread
prepares every round trip and applies its result, so all state stays on that thread.
Claims read on from the worker's position (claims.py).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from .._leases import ClaimRequest, Finish, LimitedClaimReport, RoundTrip
from .._retry import Outcome
from .._store.error_kinds import is_connection_failure, is_transient
from .._text import storable
from .background import BackgroundExchanger
from .claims import ClaimCursor, Prefetch, round_trip_share
from .connection import Connect
from .limited import LimitedClaims
from .services import ErrorLog

if TYPE_CHECKING:
    from .._execution.running import Running
    from .._store.ports import WorkerPort
    from .parts import LoopParts
    from .settings import WorkerSettings

logger = logging.getLogger("pgtasks.worker")

#: Round trips in flight at once while jobs keep the worker busy, each on its own lane
#: (thread and connection). Two keep the server and the jobs busy at the same time: a
#: round trip takes longer than short jobs take to run a batch, so with one lane the jobs
#: wait for it, and it for them. The second lane connects when it is first used.
LANES = 2
#: Seconds the lanes rest after a round trip met a transient error (the loop thread runs
#: the next one, and backs off while the error lasts).
TRANSIENT_REST = 0.5


#: The result of a round trip that has not run.
NOTHING = RoundTrip({}, ())


@dataclasses.dataclass
class Exchange:
    """One round trip: the attempts whose ends it writes (``batch``, as ``finishes``) and
    the claim it makes (None: none), then what it did (``trip``) or the error it met."""

    batch: list[tuple[Running, Outcome]]
    finishes: Sequence[Finish]
    claim: ClaimRequest | None
    trip: RoundTrip = NOTHING
    error: psycopg.Error | None = None
    #: Whether the error broke the connection (vs. the server refusing the statement).
    broken: bool = False
    #: How long the round trip took.
    seconds: float = 0.0
    #: time.monotonic() when the round trip was prepared.
    started: float = 0.0

    @property
    def limit(self) -> int:
        """How many jobs it claims at most."""
        return self.claim.limit if self.claim is not None else 0

    def answered(self, trip: RoundTrip, seconds: float) -> None:
        """The round trip went through in ``seconds``: what it did."""
        self.trip = trip
        self.seconds = seconds

    def failed(self, error: psycopg.Error, *, broken: bool) -> None:
        """The round trip failed (``broken``: the error broke its connection)."""
        self.error = error
        self.broken = broken


class Exchanges:
    """The round trips of one worker's claim loop, and the state they keep between them."""

    def __init__(
        self,
        settings: WorkerSettings,
        parts: LoopParts,
        *,
        store: WorkerPort,
        prefetch: Prefetch,
        tasks: Mapping[str, object],
    ) -> None:
        self.name = parts.name
        self.queries = store
        self.registration = parts.registration
        self.ledger = parts.ledger
        self.executor = parts.executor
        self.connection = parts.connection
        self.reporter = parts.reporter
        self.errors = parts.errors
        self.queues = settings.queues
        self.aging = settings.priority_aging
        self.queue_aging = settings.queue_aging
        self.prefetch = prefetch
        self.tasks = tasks
        poll_interval = settings.poll_interval
        self.cursor = ClaimCursor(poll_interval)
        #: The lanes of round trips off the loop thread (see background.py), the number
        #: of jobs each round trip in flight is claiming, whether a lost reply may have
        #: left claims to recover, and until when the lanes rest after a connection failed.
        self.lanes: list[BackgroundExchanger] = []
        self._claiming: dict[BackgroundExchanger, int] = {}
        self._recover_needed = False
        self._background_rest_until = 0.0
        #: The last claim took all it asked for: claim again without waiting.
        self._maybe_more = True
        #: The paused queues as the listener last read them: left out
        #: of every claim. Replaced whole by the listener thread, read by the loop.
        self._paused: frozenset[str] = frozenset()
        self._task_names: tuple[str, ...] | None = None
        self._task_count = 0
        #: When claims ask for jobs under limits first, and what they
        #: wait for in between (limited.py). Whether some limit is stored is set at start.
        self._limits = LimitedClaims(self.name, poll_interval)
        #: Failures of a plain claim that followed a limited one in a round trip of its own.
        self.plain_errors = ErrorLog(f"plain claim of worker {self.name}")
        #: Limited jobs this worker holds (one ending frees room for the next).
        self.limited_ids: set[int] = set()

    def start(self, *, paused: frozenset[str], limited: bool) -> None:
        """What the worker read before its first claim: the paused queues, and whether
        some limit is stored."""
        self._paused = paused
        self._limits.start(stored=limited)

    # -- state the loop reads, changed through the methods below --
    @property
    def paused(self) -> frozenset[str]:
        return self._paused

    def set_paused(self, paused: frozenset[str]) -> frozenset[str]:
        """The listener read the paused queues (its thread); returns the previous ones."""
        previous, self._paused = self._paused, paused
        return previous

    @property
    def maybe_more(self) -> bool:
        """The last claim took all it asked for, or a failure may have hidden jobs: claim
        again without waiting for a wake-up."""
        return self._maybe_more

    def claim_again(self) -> None:
        """Claim at once on the next step (a failure spent the wake-up that led to it)."""
        self._maybe_more = True

    def claimed(self, claimed: int, limit: int) -> None:
        """A claim took ``claimed`` of the ``limit`` it asked for (more: with the jobs its
        finish handed over)."""
        self._maybe_more = claimed >= limit

    @property
    def recover_needed(self) -> bool:
        """A reply may have been lost with claims in it: recover before claiming."""
        return self._recover_needed

    def lost_track(self) -> None:
        """Something failed between a claim and its reply: recover, then claim again."""
        self._recover_needed = self._maybe_more = True

    def recover(self, timeout: float) -> None:
        """Settle the round trips in flight (waiting up to ``timeout`` seconds) and
        release the jobs claimed by replies lost with a connection."""
        self.settle_background(timeout)
        self.recover_leases()
        self._recover_needed = False

    def start_background(self, connect: Connect, wake: Any) -> None:
        """Round trips off the loop thread pay off with at least two slots (prefetch
        included): one can run jobs while the other is on the server."""
        if self.executor.capacity + self.prefetch.most >= 2:
            self.lanes = [
                BackgroundExchanger(
                    connect, self.run, wake, name=f"pgtasks-exchange-{self.name}-{number}"
                )
                for number in range(1, LANES + 1)
            ]

    def close(self) -> None:
        for lane in self.lanes:
            lane.close()

    @property
    def claiming(self) -> int:
        """Jobs the round trips in flight are claiming (slots they will fill)."""
        return sum(self._claiming.values())

    @property
    def pipeline(self) -> int:
        """The most jobs the worker holds now: its slots and the prefetch."""
        return self.executor.capacity + self.prefetch.jobs

    def share(self, free: int) -> int:
        """How many of ``free`` slots the next round trip claims (claims.round_trip_share)."""
        return round_trip_share(free, self.pipeline, len(self.lanes))

    def in_shares(self) -> bool:
        """Whether round trips claim the worker's pipeline in shares now (large enough)."""
        pipeline = self.pipeline
        return self.share(pipeline) < pipeline

    # -- limited claims (limited.py) --
    def wake_limited(self) -> None:
        """An enqueue was notified: the next claim asks for limited jobs again (any thread)."""
        self._limits.reset()

    def limits_freed(self, names: list[str]) -> bool:
        """Another worker freed slots of the limits ``names`` (the listener's thread):
        True when this worker waits for one of them (it should claim now)."""
        return self._limits.freed(names)

    def limits_notified(self, payload: str, worker_id: int | None) -> bool:
        """A notification on the limits channel (the listener's thread): True when the
        loop should claim now. "changed:<name>": an operator changed a limit, so claims
        ask for limited jobs from the next one on (a worker that started with none
        stored, too); "<worker id>:<names>": slots freed by another worker."""
        owner, _, names = payload.partition(":")
        if owner == "changed":
            self._limits.changed()
            return True
        if owner == str(worker_id):
            return False
        return self._limits.freed(names.split(","))

    def limits_changed(self) -> None:
        """Some limit is stored now (the poll that stands in for a missed notification)."""
        self._limits.changed()

    def limits_stored(self) -> bool:
        """Whether claims ask for limited jobs (some limit was stored)."""
        return self._limits.stored

    def limited_due(self, now: float) -> bool:
        """A rate token this worker waits for is due, or a failed limited claim is to be
        tried again: claim even if nothing else calls for it."""
        return self._limits.due(now)

    @property
    def limited_wake_at(self) -> float | None:
        """When (time.monotonic()) the loop wakes for a limited claim; None: not scheduled."""
        return self._limits.wake_at

    def limited_ended(self) -> bool:
        """A limited job of this worker ended and its outcome is not written yet: the round
        trip that writes it claims too, so its slot is taken at once."""
        limited_ids = self.limited_ids
        return bool(limited_ids) and any(
            running.job.id in limited_ids for running, _ in self.ledger.unwritten
        )

    # -- paused queues --
    def claim_filter(self) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None] | None:
        """The queues to claim from and the queues to leave out, given the paused queues;
        None when every queue of this worker is paused (nothing to claim).

        A worker of named queues claims from those not paused (the claim statement is
        unchanged); a worker of every queue leaves the paused ones out. With none
        paused, both are ``(queues, None)``.
        """
        paused = self._paused
        if not paused:
            return self.queues, None
        if "" in paused:  # its host is paused (pause_host): every queue is
            return None
        if self.queues is None:
            return None, tuple(sorted(paused))
        queues = tuple(queue for queue in self.queues if queue not in paused)
        return (queues, None) if queues else None

    # -- one round trip --
    def exchange(self, limit: int) -> int:
        """Write finished outcomes and claim up to ``limit`` jobs in one round trip."""
        exchange = self.prepare(limit)
        try:
            self.run(self.connection.get(), exchange)
        except BaseException:
            self.ledger.give_back(exchange.batch)
            raise
        return self.apply(exchange)

    def send(self, limit: int, now: float) -> int | None:
        """Start a round trip claiming up to ``limit`` jobs: in the background while jobs
        keep the worker busy (None: applied when it is back), else at once (the number
        of jobs claimed)."""
        lane = self._free_lane(now)
        if lane is not None:
            lane.submit(self.prepare(limit))
            self._claiming[lane] = limit
            return None
        return self.exchange(limit)

    def prepare(self, limit: int) -> Exchange:
        """Take the unwritten outcomes into a round trip that claims up to ``limit`` jobs."""
        batch = self.ledger.take_unwritten()
        finish = Finish.of
        finishes = [finish(running.job, outcome) for running, outcome in batch]
        limited_ids = self.limited_ids
        if limited_ids:
            for running, _ in batch:
                if running.job.id in limited_ids:
                    # A limited job of ours ended: its slot is free for the next claim.
                    limited_ids.discard(running.job.id)
                    self._limits.reset()
        # After the resets above: this round trip's own claim answers them.
        now = time.monotonic()
        claim = self._claim_request(limit, now) if limit else None
        return Exchange(batch, finishes, claim, started=now)

    def _claim_request(self, limit: int, now: float) -> ClaimRequest | None:
        """What the round trip claims: None when every queue of this worker is paused."""
        claim_filter = self.claim_filter()
        if claim_filter is None:
            return None
        queues, excluded = claim_filter
        return ClaimRequest(
            worker_id=self.registration.worker_id or 0,
            limit=limit,
            queues=queues,
            excluded_queues=excluded,
            # Only the tasks this worker knows: another app or a newer deploy may know the
            # others (a job of theirs is never failed here, it waits for them).
            task_names=self._known_task_names(),
            after=self.cursor.claim_from(),
            limited=self._limits.asking(now),
            aging=self.aging,
            queue_aging=self.queue_aging,
        )

    def run(self, conn: psycopg.Connection[Any], exchange: Exchange) -> None:
        """The round trip itself (on the loop's or the background thread): no state."""
        worker_id = self.registration.worker_id
        if worker_id is None:
            raise RuntimeError("the worker is not registered")
        # The lease owner is the registration the claim runs under.
        claim = exchange.claim.for_worker(worker_id) if exchange.claim is not None else None
        started = time.monotonic()
        store = self.queries
        try:
            trip = store.finish_and_claim_jobs(conn, exchange.finishes, claim)
        except psycopg.Error as error:
            if claim is None or not claim.limited or not _still_usable(conn, error):
                raise
            # The round trip failed as a whole (nothing of it was written). If it goes
            # through without the limited claim, that claim was the cause: the plain
            # claim must not wait for it. Otherwise the error is the round trip's own.
            trip = store.finish_and_claim_jobs(conn, exchange.finishes, claim.plain(claim.limit))
            report = LimitedClaimReport(
                error=f"{type(error).__name__}: {str(error).strip() or 'no message'}"
            )
            trip = dataclasses.replace(trip, report=report)
        exchange.answered(trip, time.monotonic() - started)

    def apply(self, exchange: Exchange) -> int:
        """Log the written outcomes and start the claimed jobs (loop thread)."""
        jobs = exchange.trip.claimed
        reporter = self.reporter
        reporter.written(exchange.batch, exchange.trip.written)
        claim = exchange.claim
        if claim is not None:
            self.cursor.claimed(jobs, from_start=claim.after is None, seconds=exchange.seconds)
        if claim is not None and claim.limited:
            taken = [job.id for job in jobs if job.limited]
            self.limited_ids.update(taken)
            report = exchange.trip.report
            self._limits.claimed(
                asked=claim.limit, taken=len(taken), report=report, started=exchange.started
            )
            if report.plain_error is not None:
                # The plain claim after the limited one failed on its own: the limited
                # jobs and the outcomes stand; the plain claim is tried again next time.
                self.plain_errors.failed(RuntimeError(report.plain_error))
            else:
                self.plain_errors.recovered()
        started, submit, observed = (
            self.ledger.started,
            self.executor.submit,
            reporter.observers,
        )
        # The next jobs of sequences the finish handed over run as claimed ones (they
        # have no place in the claim order: the position stays the claim's).
        handed = exchange.trip.handed
        if handed:
            jobs = [*handed, *jobs]
        for job in jobs:
            if observed:
                reporter.notify("job_started", job)
            started(submit(job))
        reporter.count("claimed", len(jobs))
        return len(jobs)

    # -- the round trips in the background --
    def _free_lane(self, now: float) -> BackgroundExchanger | None:
        """The lane to run the next round trip on, if it goes off the loop thread: only
        while jobs keep the worker busy (an idle worker's claim takes the shortest path)
        and the lanes are healthy."""
        if not self.lanes or now < self._background_rest_until or not self._busy():
            return None
        for lane in self.lanes:
            if not lane.busy:
                return lane
        return None

    @property
    def background_busy(self) -> bool:
        """Some round trip is in flight on a lane."""
        return any(lane.busy for lane in self.lanes)

    def lanes_full(self, now: float) -> bool:
        """Every lane has a round trip in flight while jobs keep the worker busy: the
        next round trip waits for the first one back (its return wakes the loop) rather
        than block the loop thread on a round trip of its own."""
        return (
            bool(self.lanes)
            and now >= self._background_rest_until
            and self._busy()
            and all(lane.busy for lane in self.lanes)
        )

    def _busy(self) -> bool:
        """Jobs keep the worker busy: running, with outcomes to write, or being claimed."""
        return bool(self.ledger.in_flight or self.ledger.unwritten or self._claiming)

    def batch_more(self, limit: int) -> bool:
        """With a round trip in the background, is this one too small to start now?

        Another round trip pays off when it carries a real batch (half of the worker's
        slots and prefetch, in outcomes to write and jobs to claim: a share, when the
        pipeline is claimed in shares); a trickle waits for one in flight to come back
        instead. (A quarter let jobs that end in bursts, async ones that end on one event
        loop, cut the shares into round trips of 20 to 50 jobs where sync jobs kept 75.)
        """
        if not self.background_busy:
            return False
        batch = max(1, self.pipeline // 2)
        return len(self.ledger.unwritten) + limit < batch

    def take_background(self) -> None:
        """Apply the round trips that are back."""
        for lane in self.lanes:
            exchange = lane.take()
            if exchange is not None:
                self._apply_background(lane, exchange)

    def _apply_background(self, lane: BackgroundExchanger, exchange: Exchange) -> None:
        self._claiming.pop(lane, None)
        if exchange.error is None:
            claimed = self.apply(exchange)
            if exchange.limit:
                self.claimed(claimed, exchange.limit)
            return
        # Not written: the outcomes go back to be written by the next round trip.
        self.ledger.give_back(exchange.batch)
        self._maybe_more = True
        if is_transient(exchange.error) and not exchange.broken:
            # A lock timeout, a serialization failure, a deadlock: the next round trip
            # runs on the loop thread, which pauses before trying again.
            self.errors.failed(exchange.error)
            self._background_rest_until = time.monotonic() + TRANSIENT_REST
            return
        if exchange.broken:
            # Its claim may have committed with the reply lost: recover before claiming
            # again, and rest the lanes for a moment.
            self.errors.failed(exchange.error)
            self._recover_needed = True
            self._background_rest_until = time.monotonic() + 1.0

    def settle_background(self, timeout: float) -> None:
        """Wait for the round trips in flight (if any) and apply them."""
        deadline = time.monotonic() + timeout
        for lane in self.lanes:
            if not lane.wait(max(0.0, deadline - time.monotonic())):
                logger.warning(
                    "worker %s: a background round trip did not return within %g s; leaving it",
                    self.name,
                    timeout,
                )
                continue
            exchange = lane.take()
            if exchange is not None:
                self._apply_background(lane, exchange)

    # -- failures --
    def write_one_by_one(self, batch_error: Exception) -> None:
        """The server refused a batch of outcomes: write them one at a time, and fail the
        attempt whose outcome it cannot store with an error saying so."""
        ledger = self.ledger
        batch = ledger.take_unwritten()
        for index, (running, outcome) in enumerate(batch):
            ledger.replace_unwritten([(running, outcome)])
            try:
                self.exchange(0)
                continue
            except Exception as error:
                if isinstance(error, psycopg.Error) and not self.connection.usable:
                    ledger.replace_unwritten(batch[index:])
                    raise
                replacement = Outcome.failed(
                    storable(
                        f"pgtasks could not record this attempt's outcome ({outcome.kind}):"
                        f" {type(error).__name__}: {error}"
                    )
                )
            ledger.replace_unwritten([(running, replacement)])
            try:
                self.exchange(0)
            except Exception:
                ledger.replace_unwritten([])
                logger.exception(
                    "job %d: cannot record any outcome (%s); it will be rescued",
                    running.job.id,
                    batch_error,
                )

    def recover_leases(self) -> None:
        """After a connection failure: release jobs we claimed but never received.

        A claim can commit and its reply be lost with the connection; those jobs are
        running under our (heartbeating) registration, so no rescuer would free them.
        """
        worker_id = self.registration.worker_id
        if worker_id is None:
            return
        self.ledger.collect()
        released = self.queries.release_orphaned_jobs(
            self.connection.get(), worker_id=worker_id, known_ids=self.ledger.known_ids()
        )
        if released:
            logger.warning(
                "worker %s: released %d job(s) claimed by a reply lost with the connection: %s",
                self.name,
                len(released),
                ", ".join(str(job_id) for job_id in sorted(released)),
            )

    def _known_task_names(self) -> tuple[str, ...]:
        """The app's task names, which claims are limited to, sorted once per change (batch
        tasks' jobs are the batch service's, batches.py)."""
        if self._task_names is None or self._task_count != len(self.tasks):
            self._task_count = len(self.tasks)
            tasks = self.tasks.items()
            self._task_names = tuple(
                sorted(name for name, task in tasks if getattr(task, "batch", None) is None)
            )
        return self._task_names


def _still_usable(conn: psycopg.Connection[Any], error: psycopg.Error) -> bool:
    """The server refused a statement and the connection is fine (not in a transaction)."""
    return (
        not conn.closed
        and not is_connection_failure(error)
        and conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
    )
