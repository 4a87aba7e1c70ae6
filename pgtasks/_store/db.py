"""Connections: DSN resolution, password redaction, pools and the reconnect policy."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import psycopg
from psycopg import conninfo

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


_URL_PASSWORD = re.compile(r"(?P<head>postgres(?:ql)?://[^:/@?#]*:)(?P<password>[^@/]*)(?=@)")
#: A key=value password: quoted ('a b', with \' and \\ escapes), or unquoted up to the
#: next space that is not escaped (libpq reads "a\ b" as "a b").
_KEYWORD_PASSWORD = re.compile(
    r"(?P<head>\bpassword\s*=\s*)(?P<password>'(?:[^'\\]|\\.)*'?|(?:\\.|[^\s\\])+\\?)"
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


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """Hide passwords in a DSN (URL or key=value form) or in any text that may hold one."""
    text = _URL_PASSWORD.sub(lambda match: match["head"] + "***", text)
    text = _KEYWORD_PASSWORD.sub(lambda match: match["head"] + "***", text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def dsn_password(dsn: str) -> str | None:
    try:
        password = conninfo.conninfo_to_dict(dsn).get("password")
        return str(password) if password else None
    except psycopg.ProgrammingError:
        return None


def dsn_secrets(dsn: str) -> tuple[str, ...]:
    """The forms of ``dsn``'s password that a text may hold: as is and URL-encoded."""
    password = dsn_password(dsn)
    if not password:
        return ()
    forms = {password, quote(password, safe=""), quote_plus(password, safe="")}
    # Longest first: a form that contains another is replaced whole.
    return tuple(sorted(forms, key=len, reverse=True))


def describe_dsn(dsn: str) -> str:
    """``host:port/dbname`` for logs; never the password."""
    try:
        params = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return redact(dsn)
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    if host.startswith("/"):
        host = f"socket {host}"
    port = params.get("port")
    database = params.get("dbname") or params.get("user") or "postgres"
    return f"{host}{':' + str(port) if port else ''}/{database}"


def unavailable_error(dsn: str, cause: BaseException | None, timeout: float) -> Exception:
    """A DatabaseUnavailableError naming the server (never the password) and the cause."""
    password = dsn_password(dsn)
    detail = redact(str(cause), (password,) if password else ()) if cause else "no connection"
    detail = " ".join(detail.split())  # libpq's messages span lines; keep errors on one
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
    password = dsn_password(dsn)
    detail = " ".join(redact(str(error), (password,) if password else ()).split())
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


def probe_connection_error(
    dsn: str, timeout: float, kwargs: Mapping[str, Any] | None = None
) -> BaseException | None:
    """Try one connection (with the pool's ``kwargs``) to learn why the pool cannot connect."""
    try:
        with psycopg.connect(dsn, **{**(kwargs or {}), "connect_timeout": max(1, int(timeout))}):
            return None
    except psycopg.Error as error:
        return error


#: The startup option that pins a direct connection's transactions to READ COMMITTED,
#: whatever the database's or role's default (Database.pin_isolation).
PINNED = r"-c default_transaction_isolation=read\ committed"


def pinned_options(options: str | None) -> str:
    """libpq startup ``options`` with the isolation pin last (it wins over a default
    given there)."""
    return f"{options} {PINNED}" if options else PINNED


def refuses_startup_options(error: BaseException) -> bool:
    """A pooler (PgBouncer before 1.20, in any pool mode) refused the startup options."""
    return "unsupported startup parameter" in str(error)


def pool_kwargs() -> dict[str, Any]:
    return {"autocommit": True}


def embedded_data_dir(configured: str | os.PathLike[str] | None) -> Path:
    return Path(configured or os.environ.get("PGTASKS_EMBEDDED_DIR") or ".pgtasks").resolve()
