"""Healing stuck workflow steps: the pass (``heal``) and the worker's Healer, which the
rescuer runs on its connection every ``heal_interval`` seconds.

A workflow moves on in the transaction that ends each of its jobs (the workflow
triggers). A step can still be left waiting: a hand-edited row made
that work fail (the error was tolerated and recorded), or a row was changed by hand. The
pass finds waiting steps none of whose predecessors is unfinished and moves each on in a
transaction of its own, under its row lock (``workflow_heal_step``): it starts it with
its input assembled as the trigger does, or cancels it (and what follows it) when a
predecessor failed, was cancelled or is gone. Each heal is recorded as an incident
(``pgtasks doctor``); a step it cannot move on is recorded too, and left waiting.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

from .._store.error_kinds import is_transient
from .._workflows_text import HealResult

if TYPE_CHECKING:
    from .._store.queries import Queries

logger = logging.getLogger("pgtasks.healer")

#: Steps read per query of a pass.
HEAL_BATCH = 500


def heal(
    store: Queries,
    conn: psycopg.Connection[Any],
    *,
    batch_size: int = HEAL_BATCH,
    stopping: Callable[[], bool] = lambda: False,
) -> HealResult:
    """One healing pass over every stuck step (``conn`` in autocommit: one transaction
    per step). A step that meets a lock timeout, a serialization failure or a deadlock is
    passed over until the next pass."""
    if not conn.autocommit:
        raise ValueError("heal() needs an autocommit connection (one transaction per step)")
    result = HealResult()
    after = 0
    while not stopping():
        stuck = store.find_stuck_steps(conn, after=after, limit=batch_size)
        for job_id in stuck:
            if stopping():
                break
            try:
                outcome = store.heal_step(conn, job_id)
            except psycopg.Error as error:
                if not is_transient(error) or conn.broken:
                    raise
                logger.info("healing step %d: %s; trying again next pass", job_id, error)
                outcome = "skipped"
            result.add(job_id, outcome)
            _log(job_id, outcome)
        if len(stuck) < batch_size:
            break
        after = stuck[-1]
    return result


def _log(job_id: int, outcome: str) -> None:
    if outcome == "started":
        logger.warning(
            "healed workflow step: job %d was waiting although its predecessors were all"
            " done; started it with its input",
            job_id,
            extra={"job_id": job_id},
        )
    elif outcome == "cancelled":
        logger.warning(
            "healed workflow step: job %d was waiting after a predecessor failed, was"
            " cancelled or is gone; cancelled it",
            job_id,
            extra={"job_id": job_id},
        )
    elif outcome == "unhealable":
        logger.error(
            "workflow step job %d is stuck and could not be moved on; see pgtasks doctor",
            job_id,
            extra={"job_id": job_id},
        )


class Healer:
    """Runs a healing pass every ``interval`` seconds (with jitter), on the connection of
    the service that calls :meth:`run_if_due` (the worker's rescuer: no connection of
    its own).

    One worker of a schema heals at a time: a pass starts only when it gets the schema's
    healer advisory lock (a session lock on that connection, released after the pass, or
    by the server if the connection dies). ``use_lock`` False (a connection through a
    transaction pooler, where a session lock would stay on whichever server connection
    took it): every worker runs its passes, which is safe because each step is moved on
    under its own row lock, exactly once; only the work is repeated.
    """

    def __init__(
        self,
        owner: str,
        interval: float,
        *,
        store: Queries,
        use_lock: bool = True,
        stopping: threading.Event | None = None,
    ) -> None:
        self.owner = owner
        self.use_lock = use_lock
        self.interval = interval
        self.queries = store
        #: A pass stops between steps once set (the rescuer's, which runs the passes).
        self.stopping = stopping if stopping is not None else threading.Event()
        self._next = time.monotonic() + self._wait()
        #: The result of the last pass this worker ran (None: none yet, or lock busy).
        self.last_result: HealResult | None = None

    def _wait(self) -> float:
        return self.interval * random.uniform(0.9, 1.1)  # noqa: S311 - spreading load only

    def run_if_due(self, conn: psycopg.Connection[Any]) -> HealResult | None:
        """A pass when ``interval`` has passed since the last one (tried or not)."""
        if time.monotonic() < self._next:
            return None
        self._next = time.monotonic() + self._wait()
        return self.heal(conn)

    def heal(self, conn: psycopg.Connection[Any]) -> HealResult | None:
        """One pass; None when another worker holds the lock."""
        store = self.queries
        if not self.use_lock:
            result = heal(store, conn, stopping=self.stopping.is_set)
            self.last_result = result
            return result
        if not store.lock_healer(conn):
            logger.debug("healer of worker %s: another worker is healing", self.owner)
            return None
        try:
            result = heal(store, conn, stopping=self.stopping.is_set)
        finally:
            if not conn.closed and not conn.broken:
                store.unlock_healer(conn)
        self.last_result = result
        return result
