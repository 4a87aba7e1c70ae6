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
from tests.support.environment import ROOT, pgtasks_command, pgtasks_env
from tests.support.processes import Processes
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

APP_PATH = "tests.apps.beat_app:app"


def test_a_barrage_of_stop_signals_stops_beat_with_status_0(
    app: App, admin: psycopg.Connection[Any], tmp_path: Path, dsn: str
) -> None:
    processes = Processes(tmp_path, APP_PATH)
    try:
        beat = processes.beat(dsn, app.schema)
        beat.wait_for_log("beat is active for schema", timeout=30)
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
        # At most one stop message: the stop is set before the message is logged (logging
        # may be what a stuck process is in), so a beat that ends at once can exit first.
        assert log.count("received, stopping") <= 1, log
        assert "beat stopped" in log
        # Its session (and leader lock) ended with it.
        wait_until(lambda: not _sessions_of(admin, beat.pid), message="the beat's session")
    finally:
        processes.close()


def test_beat_refuses_a_store_the_app_does_not_have(app: App, dsn: str) -> None:
    result = subprocess.run(
        pgtasks_command("beat", "-A", APP_PATH, "--store", "nope"),
        cwd=ROOT,
        env=pgtasks_env(dsn, app.schema),
        capture_output=True,
        timeout=60,
    )

    assert result.returncode == 2, result.stderr
    assert b"no store named 'nope'" in result.stderr
    assert b"stores are default" in result.stderr
    assert b"beat starting" not in result.stderr


def _sessions_of(admin: psycopg.Connection[Any], pid: int) -> list[Any]:
    return admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
        [f"pgtasks-beat:{pid}"],
    ).fetchall()
