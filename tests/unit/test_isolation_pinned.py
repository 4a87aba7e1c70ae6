"""Every connection pgtasks opens runs READ COMMITTED (Store.pin_isolation, or beat's
session settings): a source check that no new connection site forgets it. The fault test
tests/faults/test_isolation.py shows what it protects."""

from __future__ import annotations

import re
from pathlib import Path

import pgtasks

PACKAGE = Path(pgtasks.__file__).resolve().parent
#: Connections that run no statement of pgtasks: the probe that learns why connecting fails.
NOT_QUERIED = {"_store/db.py"}
CONNECT = re.compile(r"psycopg\.connect\(|(?:Async)?ConnectionPool\(")


def test_every_module_that_opens_a_connection_pins_its_isolation() -> None:
    unpinned = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        text = path.read_text()
        sites = len(CONNECT.findall(text))
        if not sites or relative in NOT_QUERIED:
            continue
        pins = text.count("pin_isolation") + text.count("configure_beat_session(")
        if pins < sites:
            unpinned.append(f"{relative}: {sites} connection site(s), {pins} pin(s)")
    assert not unpinned, unpinned


def test_both_pools_pin_their_connections() -> None:
    text = (PACKAGE / "_store" / "database.py").read_text()
    assert "configure=self.store.pin_isolation" in text
    assert "configure=self.store.apin_isolation" in text


def test_beat_sessions_pin_read_committed() -> None:
    queries = (PACKAGE / "sql" / "queries.sql").read_text()
    beat = queries.split("-- name: configure_beat_session")[1].split("-- name:")[0]
    assert "set_config('default_transaction_isolation', 'read committed', false)" in beat
