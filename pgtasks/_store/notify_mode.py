"""Whether a one-job enqueue notifies its queue's workers (``App(notify=...)``).

PostgreSQL serializes the commits of every transaction that sent a NOTIFY (a lock on the
notification queue, held through the commit's WAL flush): many concurrent producers that
each notify hit a ceiling of a few hundred commits per second (docs/performance.md,
"Many producers"). The modes:

- ``"always"`` (the default): every one-job enqueue that is a transaction of its own
  notifies; idle workers pick its job up in milliseconds.
- ``"off"``: none does; workers find new jobs by polling (with ``notify="off"`` or
  ``"auto"`` on the worker's App, an adaptive interval: see ``ADAPTIVE_POLL_MIN``).
- ``"auto"``: this process notifies while its one-job enqueues stay at or below
  ``AUTO_NOTIFY_RATE`` per second (a sparse producer keeps millisecond pickups), and
  stops above it (a busy producer's workers find jobs by polling, as busy workers do).

Bulk enqueues, enqueues in the caller's transaction and raw inserts notify through the
trigger in every mode (one notification per statement and queue).
"""

from __future__ import annotations

import threading
import time

from .._errors import ConfigurationError

NOTIFY_MODES = ("always", "off", "auto")
#: "auto": one-job enqueues per second of this process above which it stops notifying.
AUTO_NOTIFY_RATE = 50.0
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


class EnqueueNotifications:
    """Decides, per one-job enqueue, whether it notifies (thread-safe)."""

    def __init__(self, mode: str, rate: float = AUTO_NOTIFY_RATE) -> None:
        self.mode = notify_mode(mode)
        self.rate = rate
        self._lock = threading.Lock()
        self._second = 0
        self._count = 0
        self._previous = 0

    def should_notify(self) -> bool:
        if self.mode != "auto":
            return self.mode == "always"
        now = time.monotonic()
        second = int(now)
        with self._lock:
            if second != self._second:
                self._previous = self._count if second == self._second + 1 else 0
                self._second, self._count = second, 0
            self._count += 1
            # The last second's enqueues: this one's, and the share of the one before
            # that the window still covers.
            recent = self._count + self._previous * (1.0 - (now - second))
        return recent <= self.rate
