"""Whether a one-job enqueue notifies its queue's workers (``App(notify=...)``).

PostgreSQL serializes the commits of every transaction that sent a NOTIFY (a lock on the
notification queue, held through the commit's WAL flush): many concurrent producers that
each notify hit a ceiling of a few hundred commits per second (docs/performance.md,
"Many producers"). The modes:

- ``"always"`` (the default): every one-job enqueue that is a transaction of its own
  notifies; idle workers pick its job up in milliseconds.
- ``"off"``: none does; workers find new jobs by polling (with ``notify="off"`` or
  ``"auto"`` on the worker's App, an adaptive interval: see ``ADAPTIVE_POLL_MIN``).
- ``"auto"``: a queue is notified at most once per ``notify_interval`` (default
  ``AUTO_NOTIFY_SPACING``) by all the processes of the database together: the enqueue's
  statement asks a shared gate (migration shared_notify_gate: a row per queue, locked
  SKIP LOCKED and stamped, so no producer waits for another) and notifies only when no
  transaction notified the queue within the interval. A sparse producer keeps
  millisecond pickups; a busy database sends a few notifications a second per queue
  however many processes enqueue, and the workers they wake find the jobs enqueued
  meanwhile by their adaptive polls (within ``poll_interval``). A spacing per process
  was not enough: 64 processes each notifying 5 times a second met the lock again. A
  rate the process observes would not do either: under the lock each of many producers
  is slow, so none would ever pass a threshold.

Bulk enqueues, enqueues in the caller's transaction and raw inserts notify through the
trigger in every mode (one notification per statement and queue).
"""

from __future__ import annotations

import threading
import time

from .._errors import ConfigurationError

NOTIFY_MODES = ("always", "off", "auto")
#: "auto": the least time between two notifications of one queue (the default of
#: ``App(notify_interval=...)`` and ``PGTASKS_NOTIFY_INTERVAL``).
AUTO_NOTIFY_SPACING = 0.2
#: The longest notify_interval accepted: past it, notifications would add nothing to
#: what the workers' polls (``poll_interval``) find anyway.
MAX_NOTIFY_INTERVAL = 60.0
#: The shortest idle wait of a worker whose App does not always notify: after a claim
#: that found jobs, it polls again this soon, then twice as late after each claim that
#: found none, up to ``poll_interval``.
ADAPTIVE_POLL_MIN = 0.05


def notify_mode(value: object, where: str = "notify=") -> str:
    """``value`` as a mode, or a clear error."""
    if isinstance(value, str) and value.strip().lower() in NOTIFY_MODES:
        return value.strip().lower()
    raise ConfigurationError(
        f"{where} must be one of {', '.join(repr(mode) for mode in NOTIFY_MODES)}, got {value!r}"
    )


def notify_interval(value: object, where: str = "notify_interval=", shown: object = None) -> float:
    """``value`` as seconds between two notifications of a queue ("auto"), or a clear
    error (a number > 0 and <= MAX_NOTIFY_INTERVAL)."""
    number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if number is None or not 0 < number <= MAX_NOTIFY_INTERVAL:
        raise ConfigurationError(
            f"{where} must be a number of seconds > 0 and <= {MAX_NOTIFY_INTERVAL:g},"
            f" got {value if shown is None else shown!r}"
        )
    return float(number)


class EnqueueNotifications:
    """Decides, per one-job enqueue, whether it may notify (thread-safe).

    "auto": a queue this process notified less than ``spacing`` ago is not notified (no
    round trip to ask); otherwise the statement asks the database's shared gate (migration
    shared_notify_gate: no transaction of any process notified the queue within
    ``spacing``), and ``sent`` records the notifications that went out.
    """

    def __init__(self, mode: str, spacing: float = AUTO_NOTIFY_SPACING) -> None:
        self.mode = notify_mode(mode)
        self.spacing = notify_interval(spacing)
        self._lock = threading.Lock()
        #: "auto": when this process last notified each queue (time.monotonic()).
        self._last: dict[str, float] = {}

    def params(self, queue: str) -> dict[str, object]:
        """The statement's ``notify`` (may it notify at all) and ``gate`` (None: no shared
        gate; else the spacing the gate keeps, in seconds)."""
        if self.mode != "auto":
            return {"notify": self.mode == "always", "gate": None}
        with self._lock:
            last = self._last.get(queue)
        recent = last is not None and time.monotonic() - last < self.spacing
        return {"notify": not recent, "gate": self.spacing}

    def sent(self, queue: str, notified: object) -> None:
        """Record the statement's outcome (``notified``: its ``notified`` column, None
        when it sent nothing)."""
        if self.mode != "auto" or notified is None:
            return
        with self._lock:
            if len(self._last) > 10_000:  # queue names are few; never let it grow unbounded
                self._last.clear()
            self._last[queue] = time.monotonic()
