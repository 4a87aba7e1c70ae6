"""Every connection pgtasks opens runs READ COMMITTED (Database.pin_isolation): direct
connections by a startup option, pooled ones per transaction. A source check that no new
connection site forgets it, and the options each kind of connection gets. The fault test
tests/faults/test_isolation.py shows what it protects; tests/servers/test_pgbouncer.py the
pooled case."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import pgtasks
from pgtasks._store.connecting import PINNED, DatabaseSettings, PoolSettings, pinned_options
from pgtasks._store.database import Database
from pgtasks._store.queries import Queries

PACKAGE = Path(pgtasks.__file__).resolve().parent
#: Connections that run no statement that relies on the isolation: the probe that learns
#: why connecting fails, and doctor's read of the default a session starts with.
NOT_PINNED = {"_store/connecting.py", "_app/doctor.py"}
CONNECT = re.compile(r"psycopg\.connect\(|(?:Async)?ConnectionPool\(")
PIN = re.compile(r"\bPINNED\b|pinned_options\(|pin_isolation")


def test_every_module_that_opens_a_connection_pins_its_isolation() -> None:
    unpinned = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        text = path.read_text()
        sites = len(CONNECT.findall(text))
        if not sites or relative in NOT_PINNED:
            continue
        pins = len(PIN.findall(text))
        if pins < sites:
            unpinned.append(f"{relative}: {sites} connection site(s), {pins} pin(s)")
    assert not unpinned, unpinned


def database(
    *, session_dsn: str | None = None, connection_kwargs: dict[str, Any] | None = None
) -> Database:
    settings = DatabaseSettings(
        "postgresql://127.0.0.1:1/x", "pgtasks", Path("."), session_dsn=session_dsn
    )
    pools = PoolSettings(min_size=0, max_size=1, connect_timeout=1.0, connect_attempts=1)
    return Database(
        settings, pools, queries=Queries("pgtasks"), connection_kwargs=connection_kwargs
    )


def test_direct_connections_carry_the_pin_after_the_options_given() -> None:
    given = database(connection_kwargs={"options": "-c statement_timeout=5s"})

    assert database().connection_kwargs()["options"] == PINNED
    assert given.connection_kwargs()["options"] == f"-c statement_timeout=5s {PINNED}"
    assert pinned_options(None) == PINNED


@pytest.mark.parametrize("session", [False, True])
def test_a_pooled_dsn_gets_no_startup_option_its_session_dsn_the_pin(session: bool) -> None:
    pooled = database(
        session_dsn="postgresql://127.0.0.1:2/x",
        connection_kwargs={"options": "-c statement_timeout=5s"},
    )

    kwargs = pooled.connection_kwargs(session=session)

    assert pooled.pooled
    if session:
        assert kwargs["options"].endswith(PINNED)
    else:
        assert "options" not in kwargs


def test_the_dsns_own_options_are_kept_before_the_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    """A keyword ``options`` replaces the DSN's in libpq: the DSN's (or PGOPTIONS) are
    carried into it, before the App's and the pin."""
    monkeypatch.delenv("PGOPTIONS", raising=False)
    dsn = "postgresql://h/x?options=-c%20search_path%3Dshop"
    assert pinned_options(None, dsn) == f"-c search_path=shop {PINNED}"
    assert pinned_options("-c work_mem=8MB", dsn) == f"-c search_path=shop -c work_mem=8MB {PINNED}"
    assert pinned_options(None, "host=h options='-c lock_timeout=1s'") == (
        f"-c lock_timeout=1s {PINNED}"
    )
    monkeypatch.setenv("PGOPTIONS", "-c statement_timeout=9s")
    assert pinned_options(None, "postgresql://h/x") == f"-c statement_timeout=9s {PINNED}"
    assert pinned_options(None, dsn) == f"-c search_path=shop {PINNED}"  # the DSN's win
    assert pinned_options(None, "not a dsn ===") == PINNED
