"""Counters of how often pgtasks' guarantees were exercised: their names, and a tally.

Pure module. Each counter is counted where it happens (docs/howto/metrics.md): the
worker counts lost leases, refused fenced writes, jobs released at shutdown and the jobs
of unknown tasks it released, and adds them to the database with its heartbeat; the
rescue statement counts rescues and the enqueue statements count enqueues answered by an
existing job, in their own transactions. ``pgtasks stats --json``, the dashboard and the Prometheus
series read the totals.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

#: Attempts whose lease was lost before their outcome was written (the job was rescued,
#: or released, meanwhile): counted once per attempt, at the first refused write.
LEASE_LOST = "lease_lost"
#: Jobs returned from dead (silent past the lease) workers by a rescuer.
RESCUED = "rescued"
#: Writes of a worker that the lease fence refused: an outcome, a meta or progress
#: update, a release at shutdown.
FENCED_WRITES_REFUSED = "fenced_writes_refused"
#: Enqueues answered by an existing job (an idempotency key or a uniqueness scope).
ENQUEUES_DEDUPLICATED = "enqueues_deduplicated"
#: Jobs a stopping worker gave back to pending without using up their attempt.
RELEASED_AT_SHUTDOWN = "released_at_shutdown"
#: Jobs of a task a worker's process could not run, released back to pending (never
#: failed): workers claim only the tasks they know, so this counts the jobs that reached
#: a process without the task (a process-pool child started before it was registered).
#: Jobs that no live worker knows wait unclaimed: ``stats`` and ``doctor`` name them.
UNKNOWN_TASK_JOBS = "unknown_task_jobs"

#: Pending jobs ended cancelled because their start deadline (expires=) passed before
#: any claim started them; counted by the expiry statement in its own transaction.
EXPIRED = "expired"

#: Durable steps' checkpoints written (a step's result or final error, a sleep, a wait's
#: event or timeout, a version marker), and checkpoints replayed instead of running their
#: step again (docs/howto/durable.md). Counted by the worker for its thread and async jobs.
STEPS_CHECKPOINTED = "steps_checkpointed"
STEPS_REPLAYED = "steps_replayed"
#: Enqueues that replaced the pending job of their debounce key instead of adding one
#: (counted by the enqueue statement), and batches of batch tasks run (each handler call)
#: with the jobs they held (docs/howto/flow-control.md).
ENQUEUES_DEBOUNCED = "enqueues_debounced"
BATCHES_RUN = "batches_run"
BATCH_JOBS = "batch_jobs"

COUNTER_NAMES = (
    LEASE_LOST,
    RESCUED,
    FENCED_WRITES_REFUSED,
    ENQUEUES_DEDUPLICATED,
    RELEASED_AT_SHUTDOWN,
    UNKNOWN_TASK_JOBS,
    EXPIRED,
    STEPS_CHECKPOINTED,
    STEPS_REPLAYED,
    ENQUEUES_DEBOUNCED,
    BATCHES_RUN,
    BATCH_JOBS,
)


def every_counter(totals: Mapping[str, int]) -> dict[str, int]:
    """``totals`` with every counter present (0 for one never counted), in name order of
    COUNTER_NAMES; names pgtasks does not know (a newer version's) are kept after them."""
    counters = {name: int(totals.get(name, 0)) for name in COUNTER_NAMES}
    counters.update((name, int(value)) for name, value in totals.items() if name not in counters)
    return counters


class Tally:
    """Counts by name, added from any thread. ``unstored()`` hands over what was added
    since it was last called (for the database) and ``give_back()`` returns what could
    not be stored; ``totals()`` is everything added since the tally was made."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[str, int] = {}
        self._unstored: dict[str, int] = {}

    def add(self, name: str, amount: int = 1, *, store: bool = True) -> None:
        """Count ``amount``; ``store=False``: the database counted it already."""
        if amount <= 0:
            return
        with self._lock:
            self._totals[name] = self._totals.get(name, 0) + amount
            if store:
                self._unstored[name] = self._unstored.get(name, 0) + amount

    def total(self, name: str) -> int:
        with self._lock:
            return self._totals.get(name, 0)

    def totals(self) -> dict[str, int]:
        with self._lock:
            return dict(self._totals)

    def unstored(self) -> dict[str, int]:
        """What was added (to store) since the last call; the tally forgets it."""
        with self._lock:
            unstored, self._unstored = self._unstored, {}
        return unstored

    def give_back(self, counts: Mapping[str, int]) -> None:
        """Counts ``unstored()`` handed over that could not be stored: kept for next time."""
        with self._lock:
            for name, amount in counts.items():
                self._unstored[name] = self._unstored.get(name, 0) + amount
