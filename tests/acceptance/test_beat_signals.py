"""``pgtasks beat``'s stop signals, with real processes and real signals: its handlers
only write to a pipe (StopSignals, as the worker's), so a barrage of SIGTERM/SIGINT
landing anywhere in its loop (inside a log call, inside an Event's lock) stops it with
status 0; a store it does not have is refused before it starts."""

from __future__ import annotations

import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgtasks import App
from tests.acceptance.test_beat_processes import APP_PATH, lock_holder, pgtasks
from tests.support.environment import ROOT, pgtasks_env
from tests.support.processes import Processes
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance


def test_a_barrage_of_stop_signals_stops_beat_with_status_0(
    app: App, admin: psycopg.Connection[Any], tmp_path: Path, dsn: str
) -> None:
    processes = Processes(tmp_path, APP_PATH)
    try:
        beat = processes.beat(dsn, app.schema)
        wait_until(lambda: lock_holder(admin, app.schema) == beat.pid, timeout=30)
        done = threading.Event()

        def barrage() -> None:
            # A signal every millisecond until the process has exited.
            for number in range(5000):
                if done.wait(0.001) or beat.process.poll() is not None:
                    return
                try:
                    beat.send(signal.SIGTERM if number % 2 else signal.SIGINT)
                except ProcessLookupError:
                    return

        sender = threading.Thread(target=barrage, name="test-barrage", daemon=True)
        sender.start()
        try:
            code = beat.wait_exit(30)
        finally:
            done.set()
            sender.join(10)
        log = beat.log()
        assert code == 0, log
        assert log.count("received, stopping") == 1, log
        assert "beat stopped" in log
        assert lock_holder(admin, app.schema) is None
    finally:
        processes.close()


def test_beat_refuses_a_store_the_app_does_not_have(app: App, dsn: str) -> None:
    result = subprocess.run(
        [*pgtasks("beat"), "--store", "nope"],
        cwd=ROOT,
        env=pgtasks_env(dsn, app.schema),
        capture_output=True,
        timeout=60,
    )

    assert result.returncode == 2, result.stderr
    assert b"no store named 'nope'" in result.stderr
    assert b"stores are default" in result.stderr
    assert b"beat starting" not in result.stderr
