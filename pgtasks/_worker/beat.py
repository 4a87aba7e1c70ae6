"""Beat: enqueues one job per tick of every periodic schedule of an App.

Exactly one job per tick comes from the job's idempotency key, derived from the
schedule's name and the tick in UTC (:func:`pgtasks._cron.tick_key`): any number of
beat processes, or a beat restarted in the middle of a tick, insert the same key and
the unique constraint keeps one row. On top of that, beat processes elect one active
scheduler with a PostgreSQL session advisory lock held on beat's own connection, so
the others do no work; they retry the lock every ``lock_retry_interval`` seconds and
take over when the holder's session ends. Nothing depends on the lock for correctness.

Time is the database's: each pass reads ``now()`` from the server, and the wait for
the next tick is measured with ``time.monotonic()``, never with the host's wall clock.

The state of each schedule (``processed_until``: every tick up to it is handled; the
last enqueued tick and its job) is stored in ``<schema>.periodic``. After downtime the
schedule's ``catch_up`` policy decides what is enqueued (see :func:`plan_ticks`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg

from .._app.schedules import build_spec
from .._cron import (
    DEFAULT_GRACE,
    Schedule,
    format_tick,
    plan_ticks,
)
from .._dsn import dsn_secrets, redact
from .._errors import ConfigurationError, SchemaError
from .._jobs import JobSpec
from .._retry import reconnect_delay
from .._store.migrator import check_version
from .._validation import positive_seconds
from .signals import StopSignals, worker_name

if TYPE_CHECKING:
    from .._app.app import App

logger = logging.getLogger("pgtasks.beat")

#: Shown in pg_stat_activity for beat's connection (with the process id).
APPLICATION_NAME = "pgtasks-beat"

#: Beat's statements are short: one stuck behind a lock fails, and the loop reconnects
#: (giving the leader lock up) instead of stalling while standbys wait.
STATEMENT_TIMEOUT = 30.0
LOCK_TIMEOUT = 10.0
#: TCP keepalives on both ends of beat's connection: when a beat host drops off the
#: network, the server ends its session (and releases the leader lock) after about
#: idle + interval * count = 25 seconds, so a standby can take over.
KEEPALIVE_IDLE = 10
KEEPALIVE_INTERVAL = 5
KEEPALIVE_COUNT = 3

#: Shortest wait between passes, so a clock mismatch never spins the loop.
_MIN_WAIT = 0.001


@dataclasses.dataclass(frozen=True)
class EnqueuedTick:
    """A job beat inserted (``existed``: another beat or an earlier pass inserted it)."""

    schedule: str
    tick: datetime
    job_id: int
    existed: bool


@dataclasses.dataclass(frozen=True)
class PassResult:
    """The outcome of one pass: what was enqueued and when the next pass is due."""

    enqueued: tuple[EnqueuedTick, ...]
    now: datetime
    #: Seconds until the next tick of any schedule (capped at the beat's max_wait).
    wait: float


class Beat:
    """The scheduler loop: run it with :meth:`run`, stop it with :meth:`stop`.

    ``run()`` blocks until ``stop()`` is called (from another thread or a signal
    handler). A database that goes away is logged and retried with capped exponential
    backoff; a schema that is not migrated raises :class:`SchemaNotMigratedError`.

    Options: ``leader_election`` (take the advisory lock; off only to prove that the
    idempotency key alone prevents duplicates), ``lock_retry_interval`` (how often a
    standby tries the lock), ``max_wait`` (longest wait between passes of the active
    beat; it also bounds how soon a schedule added at run time is seen), ``grace``
    (a tick at most this old is late, not missed: always enqueued), ``reconnect_max``
    (backoff cap after database errors).
    """

    def __init__(
        self,
        app: App,
        *,
        leader_election: bool = True,
        lock_retry_interval: float = 1.0,
        max_wait: float = 1.0,
        grace: float | timedelta = DEFAULT_GRACE,
        reconnect_max: float = 5.0,
    ) -> None:
        if not app.store_router.single and app.settings.store is None:
            raise ConfigurationError(
                f"this app has stores {', '.join(app.store_router.names)}: a Beat serves one"
                " (Beat(app.for_store(name)) for each; pgtasks beat runs them all)"
            )
        self.app = app
        self.leader_election = leader_election
        self.lock_retry_interval = positive_seconds(
            "lock_retry_interval", error=ValueError, value=lock_retry_interval
        )
        self.max_wait = positive_seconds("max_wait", max_wait, error=ValueError)
        self.grace = grace if isinstance(grace, timedelta) else timedelta(seconds=grace)
        if self.grace < timedelta(0):
            raise ValueError(f"grace must not be negative, got {grace!r}")
        self.reconnect_max = positive_seconds(
            "reconnect_max", error=ValueError, value=reconnect_max
        )
        self._stop_requested = threading.Event()
        self._finished = threading.Event()
        self._run_lock = threading.Lock()
        self._thread_id: int | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._is_leader = False
        self._announced_standby = False

    def __repr__(self) -> str:
        state = "active" if self._is_leader else "standby"
        return f"<Beat schema={self.app.schema} {state} schedules={len(self.app.schedules)}>"

    @property
    def is_leader(self) -> bool:
        """True while this beat holds the leader lock (always, without leader election)."""
        return self._is_leader

    # -- lifetime --------------------------------------------------------------------------
    def run(self, *, install_signal_handlers: bool = False) -> None:
        """Schedule jobs until :meth:`stop` is called (or SIGTERM/SIGINT, with
        ``install_signal_handlers`` in the main thread). A Beat runs once.
        """
        if not self._run_lock.acquire(blocking=False):
            raise RuntimeError("this Beat is already running")
        if self._finished.is_set():
            self._run_lock.release()
            raise RuntimeError("this Beat has already run; create a new one")
        self._thread_id = threading.get_ident()
        names = ", ".join(sorted(self.app.schedules)) or "none"
        logger.info(
            "beat starting for schema %s on %s; schedules: %s",
            self.app.schema,
            self.app.describe_database(),
            names,
        )
        signals = None
        if install_signal_handlers:
            # The handlers only write to a pipe; a thread of their own stops the beat
            # (a handler that logged or set an Event could wait for a lock its own
            # thread holds: signals.py).
            signals = StopSignals(worker_name(), shutdown_timeout=STOP_TIMEOUT, kind="beat")
            signals.install()
            signals.attach(BeatStop([self]))
        try:
            self._loop()
        finally:
            self._disconnect(release=True)
            if signals is not None:
                signals.restore()
            self._finished.set()
            self._run_lock.release()
            logger.info("beat stopped")

    def stop(self, timeout: float | None = None) -> bool:
        """Ask :meth:`run` to return; thread-safe and safe in signal handlers.

        Waits up to ``timeout`` seconds (None: until it has returned) unless called
        from the thread running :meth:`run` (a signal handler), where it cannot wait.
        Returns True when ``run`` has returned (or never started).
        """
        self._stop_requested.set()
        if self._thread_id is None or self._finished.is_set():
            return True
        if self._thread_id == threading.get_ident():
            return False
        return self._finished.wait(timeout)

    # -- the loop --------------------------------------------------------------------------
    def _loop(self) -> None:
        failures = 0
        while not self._stop_requested.is_set():
            try:
                wait = self._step()
            except SchemaError:
                raise
            except psycopg.Error as error:
                failures += 1
                self._disconnect(release=False)
                wait = reconnect_delay(failures, cap=self.reconnect_max)
                logger.warning(
                    "beat lost the database (%s); retrying in %.2g s (attempt %d)",
                    self._redact(error),
                    wait,
                    failures,
                )
            except Exception:
                failures += 1
                wait = reconnect_delay(failures, cap=self.reconnect_max)
                logger.exception("beat pass failed; retrying in %.2g s", wait)
            else:
                if failures:
                    logger.info("beat reconnected after %d failed attempt(s)", failures)
                failures = 0
            self._stop_requested.wait(wait)

    @property
    def elects_leader(self) -> bool:
        """Leader election is on and possible: a session lock needs a server session of
        beat's own, which a transaction pooler (a pooled dsn without session_dsn) cannot
        give. Without it every beat enqueues each tick, and the tick's idempotency key
        keeps one job."""
        return self.leader_election and self.app.database.has_session

    def _step(self) -> float:
        """One iteration: connect, try to lead, run a pass; returns seconds to wait."""
        conn = self._connect()
        if not self._is_leader:
            if self.elects_leader and not self.app.queries.lock_beat(conn):
                if not self._announced_standby:
                    logger.info(
                        "another beat is active for schema %s; standing by (retrying every %g s)",
                        self.app.schema,
                        self.lock_retry_interval,
                    )
                    self._announced_standby = True
                return self.lock_retry_interval
            self._is_leader = True
            self._announced_standby = False
            if self.elects_leader or not self.leader_election:
                logger.info(
                    "beat is active for schema %s%s",
                    self.app.schema,
                    "" if self.leader_election else " (leader election off)",
                )
            else:
                logger.warning(
                    "beat is active for schema %s without leader election: the database"
                    " goes through a transaction pooler and no session_dsn is set, so no"
                    " session lock can be held. Every beat process enqueues each tick (the"
                    " tick's idempotency key keeps one job); set App(session_dsn=...) for"
                    " one active beat",
                    self.app.schema,
                )
        return self.run_pass(conn).wait

    def _connect(self) -> psycopg.Connection[Any]:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        self._is_leader = False
        database = self.app.database
        session = database.has_session
        # The session DSN: the leader lock and the session settings below are the
        # session's. Without one (a pooled dsn alone) beat's statements go through the
        # pooler, with no session setting (it would stay on the pooler's server connection).
        conn = database.connect(
            session=session,
            application_name=f"{APPLICATION_NAME}:{os.getpid()}",
            # A beat whose network vanished notices within about half a minute.
            keepalives=1,
            keepalives_idle=KEEPALIVE_IDLE,
            keepalives_interval=KEEPALIVE_INTERVAL,
            keepalives_count=KEEPALIVE_COUNT,
        )
        try:
            if session:
                self.app.queries.configure_beat_session(
                    conn,
                    statement_timeout=STATEMENT_TIMEOUT,
                    lock_timeout=LOCK_TIMEOUT,
                    keepalives_idle=KEEPALIVE_IDLE,
                    keepalives_interval=KEEPALIVE_INTERVAL,
                    keepalives_count=KEEPALIVE_COUNT,
                )
            check_version(self.app.schema, self.app.queries.get_schema_version(conn))
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _disconnect(self, *, release: bool) -> None:
        conn, self._conn = self._conn, None
        was_leader, self._is_leader = self._is_leader, False
        if conn is None:
            return
        try:
            if release and was_leader and self.elects_leader and not conn.closed:
                self.app.queries.unlock_beat(conn)
        except psycopg.Error:
            pass  # closing the session releases the lock anyway
        finally:
            conn.close()

    def _redact(self, error: BaseException) -> str:
        return redact(str(error).strip(), dsn_secrets(self.app.dsn))

    # -- one pass --------------------------------------------------------------------------
    def run_pass(self, conn: psycopg.Connection[Any]) -> PassResult:
        """Enqueue the due ticks of every schedule once (the loop's body; public for tests)."""
        app = self.app  # the schedules whose queue routes to this beat's store
        schedules = [
            schedule
            for schedule in app.schedules.values()
            if app.store_of_queue(schedule.queue or app.get_task(schedule.task_name).queue)
            == app.store_name
        ]
        if not schedules:
            return PassResult((), self.app.queries.get_database_time(conn), self.max_wait)
        rows = self.app.queries.load_periodic(conn, [schedule.name for schedule in schedules])
        measured = time.monotonic()
        if not rows:  # another beat is creating the rows right now
            return PassResult((), self.app.queries.get_database_time(conn), _MIN_WAIT * 100)
        now: datetime = rows[0]["now"]
        states = {row["name"]: row for row in rows}
        planned_jobs: list[tuple[JobSpec, Schedule, datetime]] = []
        handled: list[Schedule] = []
        for schedule in schedules:
            state = states.get(schedule.name)
            if state is None:
                continue
            try:
                planned = self._plan(schedule, state["processed_until"], now)
            except Exception:
                logger.exception("schedule %r could not be planned; skipping it", schedule.name)
                continue
            planned_jobs += [(spec, schedule, tick) for spec, tick in planned]
            handled.append(schedule)
        # Rows are written in (schedule name, tick) order, the same in every beat process,
        # so beats writing at once (leader election off, a takeover) never deadlock.
        planned_jobs.sort(key=lambda job: (job[1].name, job[2]))
        handled.sort(key=lambda schedule: schedule.name)
        specs = [spec for spec, _, _ in planned_jobs]
        owners = [(schedule, tick) for _, schedule, tick in planned_jobs]
        enqueued = self._write(conn, specs, owners, handled, now)
        return PassResult(tuple(enqueued), now, self._wait_after(schedules, now, measured))

    def _plan(
        self, schedule: Schedule, processed_until: datetime, now: datetime
    ) -> list[tuple[JobSpec, datetime]]:
        plan = plan_ticks(
            schedule.trigger,
            processed_until,
            now,
            catch_up=schedule.catch_up,
            max_catch_up=schedule.max_catch_up,
            grace=self.grace,
        )
        if plan.missed:
            logger.warning(
                "schedule %r missed ticks after %s while no beat ran; catch_up=%r enqueues %d",
                schedule.name,
                format_tick(processed_until),
                schedule.catch_up,
                len(plan.ticks),
            )
        if not plan.ticks:
            return []
        task = self.app.get_task(schedule.task_name)
        return [(build_spec(task, schedule, tick), tick) for tick in plan.ticks]

    def _write(
        self,
        conn: psycopg.Connection[Any],
        specs: Sequence[JobSpec],
        owners: Sequence[tuple[Schedule, datetime]],
        handled: Sequence[Schedule],
        now: datetime,
    ) -> list[EnqueuedTick]:
        """Insert the jobs and advance the schedules in one transaction."""
        enqueued: list[EnqueuedTick] = []
        with conn.transaction():
            inserted = self.app.insert_specs(conn, specs) if specs else []
            last: dict[str, tuple[datetime, int]] = {}
            for (schedule, tick), job in zip(owners, inserted, strict=True):
                enqueued.append(EnqueuedTick(schedule.name, tick, job.id, job.existed))
                last[schedule.name] = (tick, job.id)
            advances = [
                (schedule.name, now, *last.get(schedule.name, (None, None))) for schedule in handled
            ]
            if advances:
                self.app.queries.advance_periodic(conn, advances)
        for item in enqueued:
            if item.existed:
                logger.debug(
                    "schedule %r tick %s: job %d was already enqueued",
                    item.schedule,
                    format_tick(item.tick),
                    item.job_id,
                )
            else:
                logger.info(
                    "schedule %r tick %s: enqueued job %d",
                    item.schedule,
                    format_tick(item.tick),
                    item.job_id,
                )
        return enqueued

    def _wait_after(self, schedules: Sequence[Schedule], now: datetime, measured: float) -> float:
        """Seconds until the next tick by the database's clock, at most ``max_wait``."""
        horizon = timedelta(seconds=self.max_wait)
        wait = self.max_wait
        for schedule in schedules:
            tick = schedule.trigger.next_tick(now, horizon)
            if tick is not None:
                wait = min(wait, (tick - now).total_seconds())
        # ``now`` was read before ``measured``: waiting from ``measured`` lands at or
        # just after the tick on the database's clock.
        return max(wait - (time.monotonic() - measured), _MIN_WAIT)


#: Seconds a beat process's stop may take before the stop signals' watchdog ends it: a
#: beat's pass is short (its statements are bounded), and it holds no job.
STOP_TIMEOUT = 10.0


class BeatStop:
    """The beats of one process as the stop signals drive them (signals.Stoppable)."""

    def __init__(self, beats: Sequence[Beat]) -> None:
        self.beats = list(beats)
        self.name = worker_name()

    def stop(self, timeout: float | None = None, *, wait: bool = True) -> None:
        for beat in self.beats:
            beat.stop(timeout if wait else 0)

    def stop_status(self) -> str:
        running = [beat.app.schema for beat in self.beats if not beat._finished.is_set()]
        return "the beat loop of schema " + ", ".join(running) if running else "nothing"

    def release_held(self, seconds: float) -> str:
        return "a beat holds no jobs (its leader lock ends with its session)"
