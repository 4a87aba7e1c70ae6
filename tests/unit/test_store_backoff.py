"""The back-off of a store whose identity cannot be read: a short interval, doubled after
each failure in a row up to a ceiling."""

from __future__ import annotations

from pgtasks._app.store_router import Backoff


def test_the_interval_doubles_up_to_its_ceiling_and_ends_in_time() -> None:
    error = OSError("down")
    failure = Backoff.after(error, None, 100.0, (1.0, 5.0))
    assert (failure.until, failure.interval) == (101.0, 1.0)
    assert failure.active(100.5) and not failure.active(101.0)
    intervals = []
    for now in (101.0, 103.0, 107.0, 112.0, 117.0):
        failure = Backoff.after(error, failure, now, (1.0, 5.0))
        intervals.append(failure.interval)
        assert failure.until == now + failure.interval and failure.error is error
    assert intervals == [2.0, 4.0, 5.0, 5.0, 5.0]
