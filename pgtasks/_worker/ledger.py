"""The jobs a worker holds, from claim to written outcome (JobLedger).

It belongs to the loop thread; only :meth:`JobLedger.on_finished` is called from the
job threads (and the event loop, and the process pool's supervisor): it hands the
outcome over through a queue and wakes the loop.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._retry import Outcome

if TYPE_CHECKING:
    from .._execution.executor import Executor
    from .._execution.running import Running

logger = logging.getLogger("pgtasks.worker")

Finished = tuple["Running", "Outcome"]


class JobLedger:
    """Attempts running here (``in_flight``) and outcomes not yet written (``unwritten``)."""

    def __init__(
        self,
        wake_event: threading.Event,
        on_parked: Callable[[Running, Outcome], None] | None = None,
    ) -> None:
        self.in_flight: dict[int, Running] = {}
        self.unwritten: list[Finished] = []
        self._finished: queue.SimpleQueue[Finished] = queue.SimpleQueue()
        self._wake_event = wake_event
        #: Told of attempts that parked their job (a durable sleep, a wait, a snooze):
        #: written already, by the attempt itself.
        self._on_parked = on_parked
        #: Set by the loop while nothing a job's end brings can be acted on (every lane
        #: has a round trip in flight): endings then do not wake it; the first round
        #: trip back does, and the loop collects them all at once.
        self._quiet = False
        #: Jobs held by this worker's batch service (batches.py; any thread).
        self._elsewhere: set[int] = set()
        self._elsewhere_lock = threading.Lock()

    def hold_elsewhere(self, ids: list[int]) -> None:
        """Jobs claimed under this worker's lease outside the loop (a batch)."""
        with self._elsewhere_lock:
            self._elsewhere.update(ids)

    def release_elsewhere(self, ids: list[int]) -> None:
        with self._elsewhere_lock:
            self._elsewhere.difference_update(ids)

    def set_quiet(self, quiet: bool) -> None:
        """Whether a job's end wakes the loop (see ``_quiet``)."""
        self._quiet = quiet

    def started(self, running: Running) -> None:
        """An attempt was handed to the executor (loop thread)."""
        self.in_flight[running.token] = running

    def on_finished(self, running: Running, outcome: Outcome) -> None:
        """An attempt ended (any thread): hand over to the loop."""
        self._finished.put((running, outcome))
        # Spare the lock when the loop is already awake or would have nothing to do.
        if not self._quiet and not self._wake_event.is_set():
            self._wake_event.set()

    def collect(self) -> None:
        """Move finished attempts from the queue; free their slots."""
        while True:
            try:
                running, outcome = self._finished.get_nowait()
            except queue.Empty:
                return
            self.in_flight.pop(running.token, None)
            if running.abandoned:  # its outcome was decided (and written) already
                logger.debug(
                    "job %d: abandoned attempt %d returned", running.job.id, running.job.attempt
                )
                continue
            if outcome.kind == "parked" or running.parked:  # a parked job: nothing to write
                if outcome.kind != "parked":  # its code went on past the park (it caught it)
                    outcome = Outcome.parked(0.0, "parked, then went on")
                if self._on_parked is not None:
                    self._on_parked(running, outcome)
                continue
            self.unwritten.append((running, outcome))

    def expire(self, executor: Executor) -> None:
        """Decide the outcome of attempts past their deadline (their code keeps running)."""
        now = time.monotonic()
        for running in list(self.in_flight.values()):
            if running.deadline is not None and not running.abandoned and now >= running.deadline:
                self.unwritten.append((running, executor.expire(running)))

    def active(self) -> list[Running]:
        """Attempts still running whose outcome is not decided."""
        return [running for running in self.in_flight.values() if not running.abandoned]

    def take_unwritten(self) -> list[Finished]:
        batch, self.unwritten = self.unwritten, []
        return batch

    def replace_unwritten(self, batch: list[Finished]) -> None:
        """Outcomes to write in place of those not written yet (which are dropped)."""
        self.unwritten = list(batch)

    def give_back(self, batch: list[Finished]) -> None:
        """Outcomes that were not written go first into the next round trip."""
        self.unwritten = batch + self.unwritten

    def known_ids(self) -> list[int]:
        """Jobs still running here (a batch's too), and finished ones whose outcome is not
        written yet."""
        with self._elsewhere_lock:
            elsewhere = list(self._elsewhere)
        return (
            [running.job.id for running in self.in_flight.values()]
            + [running.job.id for running, _ in self.unwritten]
            + elsewhere
        )
