"""The app of tests/faults/test_stop_signals.py: worker_app's tasks, and a worker that
sends itself stop signals at a named point of its start.

The points are a test-only hook that lives here, not in pgtasks: when the worker process
builds this app (``pgtasks worker -A tests.apps.startup_app:app``: after the CLI set up
its signal handling, before the worker is made) it wraps the methods each point names,
so the signals come exactly there. Configured from the environment:

- ``STARTUP_SIGNAL_AT``: ``<when>:<what>``; ``when`` is ``before`` or ``after``, ``what``
  one of :data:`POINTS` (``import``: while the app is built; ``claim``: the worker's
  first round trip; ``job``: inside the first job, which then runs on).
- ``STARTUP_SIGNALS``: the signals sent there, one after the other (``SIGTERM,SIGTERM``).
- ``STARTUP_MARKER``: a file created once the app is built (a timed signal that comes
  before it may find the process without its signal handling yet: see the test).

Each point fires once. Without ``STARTUP_SIGNAL_AT`` nothing is wrapped.

``startup_app.stall_logging`` is a job that makes the worker's stop stuck the way a log
shipper that stopped answering does: it logs a record that :class:`StallingHandler` (a
handler of the root logger, like any log shipper) never finishes emitting, so the
handler's lock stays held and every later log line of the process waits for it, the
stopping worker's own among them.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pgtasks import App, JobContext
from tests.apps import lazy_app
from tests.apps._environment import environment_app
from tests.apps.worker_app import Recorder, register_tasks

#: The points a worker can signal itself at (before or after each).
POINTS = (
    "import",
    "metrics",
    "executor",
    "register",
    "heartbeat",
    "rescuer",
    "listener",
    "pruner",
    "lanes",
    "claim",
    "job",
)

_fired = threading.Event()


def _send_signals() -> None:
    """Send STARTUP_SIGNALS to this process, once (the first point reached fires)."""
    if _fired.is_set():
        return
    _fired.set()
    sent: list[signal.Signals] = []
    for name in os.environ.get("STARTUP_SIGNALS", "SIGTERM").split(","):
        signum = signal.Signals[name.strip()]
        if sent and sent[-1] == signum:
            # The same signal twice at once is one signal (POSIX: a pending signal is not
            # queued twice): a second SIGTERM comes a moment later, as an operator's does.
            time.sleep(0.2)
        os.kill(os.getpid(), signum)
        sent.append(signum)


class StallingHandler(logging.Handler):
    """Emits records marked ``stall`` forever (a destination that stopped answering)."""

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "stall", False):
            threading.Event().wait()


def _point() -> tuple[str, str] | None:
    at = os.environ.get("STARTUP_SIGNAL_AT")
    if not at:
        return None
    when, _, what = at.partition(":")
    if when not in ("before", "after") or what not in POINTS:
        raise ValueError(f"STARTUP_SIGNAL_AT={at!r}: expected before|after:<{'|'.join(POINTS)}>")
    return when, what


def _wrap(owner: type, method: str, when: str, applies: Callable[[Any], bool]) -> None:
    """Send the signals before or after ``owner.method`` runs (when ``applies(self)``)."""
    original = getattr(owner, method)

    @functools.wraps(original)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        fire = applies(self)
        if fire and when == "before":
            _send_signals()
        result = original(self, *args, **kwargs)
        if fire and when == "after":
            _send_signals()
        return result

    setattr(owner, method, wrapped)


def _install(when: str, what: str) -> None:
    from pgtasks._execution.executor import Executor
    from pgtasks._worker.exchange import Exchanges
    from pgtasks._worker.metrics import WorkerMetrics
    from pgtasks._worker.registration import Registration
    from pgtasks._worker.services import Service

    def always(_: Any) -> bool:
        return True

    if what == "metrics":
        _wrap(WorkerMetrics, "serve", when, always)
    elif what == "executor":
        _wrap(Executor, "start", when, always)
    elif what == "register":
        _wrap(Registration, "register", when, always)
    elif what in ("heartbeat", "rescuer", "listener", "pruner"):
        _wrap(Service, "start", when, lambda service: service.name == what)
    elif what == "lanes":
        _wrap(Exchanges, "start_background", when, always)
    elif what == "claim":
        # The first round trip, on the loop thread or a lane.
        _wrap(Exchanges, "run", when, always)


def build_app() -> App:
    """worker_app's tasks plus ``startup_app.first`` (a job that signals its worker when
    the point is ``job``), configured like worker_app's app."""
    point = _point()
    if point is not None and point[1] == "import" and point[0] == "before":
        _send_signals()
    app = environment_app(
        lease_timeout=2.0, heartbeat_interval=0.3, rescue_interval=0.3, poll_interval=0.2
    )
    register_tasks(app)
    recorder = Recorder(app)

    @app.task(bind=True, name="startup_app.first")
    def first(context: JobContext, seconds: float) -> float:
        """Record the run, signal the worker when the point is the job, sleep ``seconds``."""
        execution_id = recorder.started(context)
        if point is not None and point[1] == "job":
            if point[0] == "after":  # a moment into the job (an endless one too)
                time.sleep(min(seconds / 2, 0.2))
            _send_signals()
        time.sleep(seconds)
        recorder.finished(execution_id)
        return seconds

    @app.task(bind=True, name="startup_app.stall_logging")
    def stall_logging(context: JobContext) -> None:
        """Record the run, then log a record the stalling handler never lets go of."""
        recorder.started(context)
        logging.getLogger("startup_app").warning("shipping a log line", extra={"stall": True})

    logging.getLogger().addHandler(StallingHandler())
    if point is not None and point[1] not in ("import", "job"):
        _install(*point)
    marker = os.environ.get("STARTUP_MARKER")
    if marker:
        Path(marker).touch()
    if point == ("after", "import"):
        _send_signals()
    return app


#: ``app`` is built on first access, so importing this module needs no environment.
__getattr__ = lazy_app(build_app, __name__)
