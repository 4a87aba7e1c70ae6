"""Connections: DSN resolution, the connection settings and the errors of a server that
cannot be reached (the DSN text itself: pgtasks._dsn)."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg

from .._dsn import describe_dsn, redact_for
from .._errors import ConfigurationError, DatabaseUnavailableError

logger = logging.getLogger("pgtasks.db")

#: Environment variables consulted, in order, when App(dsn=...) is not given.
DSN_ENVIRONMENT = ("PGTASKS_DSN", "DATABASE_URL")
#: The session DSN and the replica DSN when App(session_dsn=..., replica_dsn=...) are not given.
SESSION_DSN_ENVIRONMENT = "PGTASKS_SESSION_DSN"
REPLICA_DSN_ENVIRONMENT = "PGTASKS_REPLICA_DSN"


@dataclasses.dataclass(frozen=True)
class ConnectionSettings:
    """An App's connections besides ``dsn``: a direct ``session_dsn`` for a ``pooled``
    dsn, a ``replica_dsn``, and whether a pooled dsn may prepare statements."""

    session_dsn: str | None = None
    replica_dsn: str | None = None
    pooled: bool | None = None
    prepared_statements: bool | None = None

    @classmethod
    def resolve(
        cls,
        *,
        session_dsn: str | None,
        replica_dsn: str | None,
        pooled: bool | None,
        prepared_statements: bool | None,
        environ: Mapping[str, str] | None = None,
    ) -> ConnectionSettings:
        """Explicit values, else PGTASKS_SESSION_DSN / PGTASKS_REPLICA_DSN."""
        environ = os.environ if environ is None else environ
        for name, flag in (("pooled", pooled), ("prepared_statements", prepared_statements)):
            if flag is not None and not isinstance(flag, bool):
                raise ConfigurationError(f"{name}= must be True, False or None, got {flag!r}")
        for name, dsn in (("session_dsn", session_dsn), ("replica_dsn", replica_dsn)):
            if dsn is not None and not isinstance(dsn, str):
                kind = type(dsn).__name__
                raise ConfigurationError(f"{name}= must be a DSN string, got {kind}")
        return cls(
            session_dsn=session_dsn or environ.get(SESSION_DSN_ENVIRONMENT) or None,
            replica_dsn=replica_dsn or environ.get(REPLICA_DSN_ENVIRONMENT) or None,
            pooled=pooled,
            prepared_statements=prepared_statements,
        )


def resolve_dsn(explicit: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The DSN to use: explicit > PGTASKS_DSN > DATABASE_URL > None (embedded)."""
    if explicit:
        return explicit
    environ = os.environ if environ is None else environ
    for name in DSN_ENVIRONMENT:
        value = environ.get(name)
        if value:
            return value
    return None


def unavailable_error(dsn: str, cause: BaseException | None, timeout: float) -> Exception:
    """A DatabaseUnavailableError naming the server (never the password) and the cause."""
    # libpq's messages span lines; keep errors on one
    detail = redact_for(dsn, str(cause)) if cause else "no connection"
    return DatabaseUnavailableError(
        f"cannot reach PostgreSQL at {describe_dsn(dsn)} within {timeout:g} s: {detail.strip()}"
        " (is the server running, and is PGTASKS_DSN right?)"
    )


def lost_prepared_statement(error: BaseException) -> bool:
    """A prepared statement of psycopg's went missing (or already existed) on the server:
    the connection goes through a transaction pooler that cannot hold them."""
    return isinstance(error, psycopg.Error) and 'prepared statement "_pg3_' in str(error)


def pooler_error(dsn: str, error: BaseException, *, declared: bool) -> ConfigurationError:
    """The ConfigurationError for :func:`lost_prepared_statement`: what to configure."""
    detail = redact_for(dsn, str(error))
    advice = (
        "keep prepared_statements=False (the default when pooled) unless the pooler holds"
        " them (PgBouncer >= 1.21 with max_prepared_statements)"
        if declared
        else "declare the pooler: App(dsn=<pooler>, session_dsn=<the server itself>) or"
        " App(pooled=True), which keep prepared statements off (prepared_statements=False)"
    )
    return ConfigurationError(
        f"{describe_dsn(dsn)} lost a prepared statement ({detail}): the connection goes"
        f" through a transaction pooler that cannot hold prepared statements; {advice}"
    )


def probe_connection_error(dsn: str, timeout: float) -> BaseException | None:
    """Try one direct connection to learn why the pool cannot connect."""
    try:
        with psycopg.connect(dsn, connect_timeout=max(1, int(timeout))):
            return None
    except psycopg.Error as error:
        return error


def pool_kwargs() -> dict[str, Any]:
    return {"autocommit": True}


def embedded_data_dir(configured: str | os.PathLike[str] | None) -> Path:
    return Path(configured or os.environ.get("PGTASKS_EMBEDDED_DIR") or ".pgtasks").resolve()
