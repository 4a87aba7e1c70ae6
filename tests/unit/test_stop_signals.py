"""StopSignals (pgtasks/_worker/signals.py) with real signals sent to this process.

The worker it drives is a recorder here; tests/faults/test_stop_signals.py drives real
``pgtasks worker`` processes. These pin the mechanism: a signal that interrupts the main
thread while it holds the lock of the event the stop sets is applied once the lock is
free (the handler itself takes no lock), a stop that comes before the worker exists is
applied when it is attached, and the watchdog reports, releases and exits.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator

import pytest

from pgtasks._worker.signals import STUCK_EXIT_STATUS, StopSignals
from tests.support.waiting import wait_until


class Recorder:
    """Records the stops it gets; ``stopping`` is set by stop(), like a Worker's events."""

    name = "host:1"

    def __init__(self) -> None:
        self.stops: list[float | None] = []
        self.stopping = threading.Event()
        self.released = threading.Event()

    def stop(self, timeout: float | None = None, *, wait: bool = True) -> None:
        self.stops.append(timeout)
        self.stopping.set()

    def stop_status(self) -> str:
        return "stop step: the running jobs to finish"

    def release_held(self, seconds: float) -> str:
        self.released.set()
        return "released 1 job(s)"


@pytest.fixture
def exits() -> list[int]:
    return []


@pytest.fixture
def signals(exits: list[int]) -> Iterator[StopSignals]:
    stop_signals = StopSignals(
        "host:1", shutdown_timeout=30.0, margin=0.2, exit_process=exits.append
    )
    previous = signal.getsignal(signal.SIGTERM)
    stop_signals.install()
    yield stop_signals
    stop_signals.restore()
    assert signal.getsignal(signal.SIGTERM) is previous


def test_a_signal_while_the_main_thread_holds_the_stop_events_lock_is_applied_after_it(
    signals: StopSignals,
) -> None:
    worker = Recorder()
    signals.attach(worker)
    # What Event.set()/clear()/wait() do on the loop thread: hold the event's lock. A
    # handler that set the event itself would wait for this thread forever.
    with worker.stopping._cond:  # type: ignore[attr-defined]
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs inside this block
        assert _eventually(lambda: signals.received == 1)  # the thread got it meanwhile
    assert worker.stopping.wait(5.0)
    assert worker.stops == [None]


def test_a_stop_before_the_worker_exists_is_applied_when_it_is_attached(
    signals: StopSignals,
) -> None:
    os.kill(os.getpid(), signal.SIGINT)
    assert _eventually(lambda: signals.received == 1)
    worker = Recorder()
    signals.attach(worker)
    assert len(worker.stops) == 1
    remaining = worker.stops[0]
    assert remaining is not None and 25.0 < remaining <= 30.0  # the grace runs from the signal
    os.kill(os.getpid(), signal.SIGTERM)
    assert _eventually(lambda: len(worker.stops) == 2)
    assert worker.stops[1] == 0  # a second signal: release at once


def test_the_watchdog_reports_releases_and_ends_a_stop_stuck_past_its_deadline(
    signals: StopSignals, exits: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    worker = Recorder()
    signals.attach(worker)
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)  # deadline now: the watchdog acts 0.2 s later
    assert worker.released.wait(10.0)
    assert _eventually(lambda: bool(exits))
    assert exits == [STUCK_EXIT_STATUS]
    text = caplog.text
    assert "did not stop within 0.2 s of its stop deadline" in text
    assert "still waiting for: stop step: the running jobs to finish" in text
    assert "released 1 job(s)" in text


def _eventually(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    try:
        wait_until(condition, timeout=timeout)
    except AssertionError:
        return False
    return True
