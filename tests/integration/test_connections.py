"""An App's connections besides ``dsn``: the session DSN, a pooled dsn, the replica.

What needs no server besides the test server: settings and their errors, what a pooled
connection sends (no startup options, no prepared statements), and replica reads falling
back to the primary. tests/servers/ runs the same against a real PgBouncer and replica.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from pgtasks import App, ConfigurationError
from pgtasks._app.doctor import diagnose
from pgtasks._worker.connection import WORKER_CONNECTION_OPTIONS, connector
from tests.support.servers import free_port


def test_session_and_replica_dsns_come_from_the_environment_unless_given(
    monkeypatch: pytest.MonkeyPatch, dsn: str
) -> None:
    monkeypatch.setenv("PGTASKS_SESSION_DSN", "postgresql://direct.example/app")
    monkeypatch.setenv("PGTASKS_REPLICA_DSN", "postgresql://replica.example/app")

    from_env = App(dsn)
    given = App(dsn, session_dsn="postgresql://other.example/app", replica_dsn="")

    assert from_env.database.configured_session_dsn == "postgresql://direct.example/app"
    assert from_env.database.replica_dsn == "postgresql://replica.example/app"
    assert from_env.database.pooled  # a session_dsn: dsn is a pooler
    assert given.database.configured_session_dsn == "postgresql://other.example/app"
    assert given.database.replica_dsn == "postgresql://replica.example/app"
    assert "pooled; sessions: direct.example" in from_env.describe_database()
    assert "replica: replica.example" in from_env.describe_database()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pooled": "yes"}, "pooled= must be True, False or None, got 'yes'"),
        ({"prepared_statements": 1}, "prepared_statements= must be True, False or None"),
        ({"session_dsn": 5432}, "session_dsn= must be a DSN string, got int"),
        ({"replica_dsn": b"postgresql://"}, "replica_dsn= must be a DSN string, got bytes"),
    ],
)
def test_bad_connection_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        App("postgresql://localhost/app", **options)


def test_a_pooled_dsn_gets_no_startup_options_and_prepares_no_statement(
    make_app: Callable[..., App], dsn: str
) -> None:
    """The test server stands in for the pooler: what pgtasks sends to a pooled dsn."""
    pooled = make_app(dsn=dsn, session_dsn=dsn)
    direct = make_app(dsn=dsn, session_dsn=None, pooled=False)
    setting = "SELECT current_setting('enable_seqscan')"

    with connector(pooled.database, owner="t")() as conn:
        assert conn.prepare_threshold is None
        assert conn.execute(setting).fetchone() == ("on",)  # no -c options sent
    with connector(pooled.database, owner="t", session=True)() as conn:
        assert conn.prepare_threshold is not None
        assert conn.execute(setting).fetchone() == ("off",)
    with connector(direct.database, owner="t")() as conn:
        assert conn.prepare_threshold is not None
        assert conn.execute(setting).fetchone() == ("off",)
        # No JIT: a disabled scan's cost would make the server compile every such plan.
        assert conn.execute("SELECT current_setting('jit')").fetchone() == ("off",)
    assert "enable_seqscan=off" in WORKER_CONNECTION_OPTIONS
    with pooled.connection() as conn:
        assert conn.prepare_threshold is None


def test_use_database_keeps_no_session_or_replica_of_the_previous_database(
    make_app: Callable[..., App], dsn: str
) -> None:
    app = make_app(dsn=dsn, session_dsn=dsn, replica_dsn=dsn)

    previous = app.use_database(dsn, app.schema)
    try:
        assert not app.database.pooled and app.database.replica_dsn is None
        assert app.database.session_dsn == dsn
    finally:
        app.restore_database(previous)
    assert app.database.pooled and app.database.replica_dsn == dsn


def test_replica_reads_fall_back_to_the_primary_when_the_replica_is_down(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    nowhere = f"postgresql://postgres:S3cret@127.0.0.1:{free_port()}/postgres"
    app = make_app(replica_dsn=nowhere, connect_timeout=1.0)

    @app.task(queue="emails")
    def send() -> None:
        return None

    send.delay()
    with caplog.at_level(logging.WARNING, logger="pgtasks.db"):
        first = app.database.read(app.queries.get_unfinished_stats)
        second = app.database.read(app.queries.get_unfinished_stats)

    assert [(row["queue"], row["pending"]) for row in first] == [("emails", 1)]
    assert [(row["queue"], row["pending"]) for row in second] == [("emails", 1)]
    warnings = [
        r.getMessage() for r in caplog.records if "could not serve a read" in r.getMessage()
    ]
    assert len(warnings) == 1  # once a minute at most
    assert "reading from the primary" in warnings[0] and "S3cret" not in warnings[0]


def test_a_replica_that_is_not_a_standby_is_named_by_doctor(
    make_app: Callable[..., App], dsn: str
) -> None:
    app = make_app(replica_dsn=dsn)
    with app.connection() as conn:
        finding = {f.check: f for f in diagnose(app, conn)}["replica"]

    assert finding.level == "warning"
    assert "is not a standby" in finding.summary


def test_doctor_says_how_the_app_connects(make_app: Callable[..., App], dsn: str) -> None:
    app = make_app(dsn=dsn, session_dsn=None, pooled=False)
    with app.connection() as conn:
        findings = {f.check: f for f in diagnose(app, conn)}

    assert findings["pooler"].level == "ok"
    assert "direct connections" in findings["pooler"].summary
    assert "replica" not in findings


def test_an_unreachable_replica_is_a_doctor_warning(make_app: Callable[..., App]) -> None:
    app = make_app(replica_dsn=f"postgresql://127.0.0.1:{free_port()}/postgres")
    with app.connection() as conn:
        finding = {f.check: f for f in diagnose(app, conn)}["replica"]

    assert finding.level == "warning"
    assert "cannot be read" in finding.summary


def test_the_options_a_dsn_gives_reach_every_connection_with_the_isolation_pin(
    make_app: Callable[..., App], dsn: str
) -> None:
    """``?options=`` in the DSN is kept beside pgtasks' READ COMMITTED pin: pooled
    connections, connections of their own and session connections run with both."""
    separator = "&" if "?" in dsn else "?"
    app = make_app(dsn=f"{dsn}{separator}options=-c%20statement_timeout%3D4321")
    if app.database.pooled:
        pytest.skip("the test server is a transaction pooler: it takes no startup options")
    shown = "SELECT current_setting('statement_timeout'), current_setting('transaction_isolation')"
    with app.connection() as conn:
        assert conn.execute(shown).fetchone() == ("4321ms", "read committed")
    for session in (False, True):
        with app.database.connect(session=session) as conn:
            assert conn.execute(shown).fetchone() == ("4321ms", "read committed")
