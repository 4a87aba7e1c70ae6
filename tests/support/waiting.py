"""Wait on conditions with timeouts: tests never sleep to synchronise."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(
    predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.01, message: str = ""
) -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message or predicate}")
        time.sleep(interval)


def stays_true(predicate: Callable[[], Any], seconds: float) -> bool:
    """Watch ``predicate`` for ``seconds``: False as soon as it is false once."""
    deadline = time.monotonic() + seconds
    outcome = wait_until(
        lambda: (not predicate() and "broken") or (time.monotonic() >= deadline and "held"),
        timeout=seconds + 10.0,
    )
    return bool(outcome == "held")


def sleep_past(seconds: float) -> None:
    """Let wall time pass while a fault lasts (used only by faults, never to sync)."""
    deadline = time.monotonic() + seconds
    wait_until(lambda: time.monotonic() >= deadline, timeout=seconds + 5, interval=0.05)
