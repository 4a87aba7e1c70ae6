"""Connecting: where connections go (DatabaseSettings), the pools' sizes
(PoolSettings), DSN resolution, pool options, the READ COMMITTED pin and the errors of a
server that cannot be reached (the DSN text itself: pgtasks._dsn)."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg

from .._dsn import describe_dsn, redact_for
from .._errors import ConfigurationError, DatabaseUnavailableError
from .._validation import positive_seconds, schema_name, whole_number
from .notify_mode import AUTO_NOTIFY_SPACING, notify_interval, notify_mode

logger = logging.getLogger("pgtasks.db")

#: Environment variables consulted, in order, when App(dsn=...) is not given.
DSN_ENVIRONMENT = ("PGTASKS_DSN", "DATABASE_URL")
#: The session DSN and the replica DSN when App(session_dsn=..., replica_dsn=...) are not given.
SESSION_DSN_ENVIRONMENT = "PGTASKS_SESSION_DSN"
NOTIFY_ENQUEUES_ENVIRONMENT = "PGTASKS_NOTIFY_ENQUEUES"
NOTIFY_ENVIRONMENT = "PGTASKS_NOTIFY"
NOTIFY_INTERVAL_ENVIRONMENT = "PGTASKS_NOTIFY_INTERVAL"
REPLICA_DSN_ENVIRONMENT = "PGTASKS_REPLICA_DSN"


@dataclasses.dataclass(frozen=True)
class DatabaseSettings:
    """Where one store's connections go: ``dsn`` (None: the embedded server in
    ``embedded_dir``) and the ``schema`` of its tables; a direct ``session_dsn`` when
    ``dsn`` is a transaction pooler (``pooled``; default: when a session_dsn is given), a
    ``replica_dsn`` for reads that may lag, and whether connections to a pooled dsn may
    prepare statements (``prepared_statements``; default: not when pooled)."""

    dsn: str | None
    schema: str
    embedded_dir: Path
    session_dsn: str | None = None
    replica_dsn: str | None = None
    pooled: bool | None = None
    prepared_statements: bool | None = None
    #: A one-job enqueue (its own transaction) notifies the workers of its queue at
    #: commit; False: it does not, and idle workers find it by polling
    #: (docs/performance.md "Many producers": NOTIFY serializes the commits of every
    #: notifying transaction of the server).
    notify_enqueues: bool = True
    #: "always", "off" or "auto" (pgtasks/_store/notify_mode.py); None: notify_enqueues'
    #: ("always" when true, "off" when false).
    notify: str | None = None
    #: "auto": the least seconds between two notifications of one queue (0 < s <= 60;
    #: pgtasks/_store/notify_mode.py).
    notify_interval: float = AUTO_NOTIFY_SPACING

    def __post_init__(self) -> None:
        schema_name(self.schema)
        object.__setattr__(self, "notify_interval", notify_interval(self.notify_interval))
        if not isinstance(self.notify_enqueues, bool):
            raise ConfigurationError(
                f"notify_enqueues= must be True or False, got {self.notify_enqueues!r}"
            )
        if self.notify is None:
            object.__setattr__(self, "notify", "always" if self.notify_enqueues else "off")
        else:
            mode = notify_mode(self.notify)
            if mode == "off" and self.notify_enqueues is not False:
                object.__setattr__(self, "notify_enqueues", False)
            object.__setattr__(self, "notify", mode)
        for name in ("pooled", "prepared_statements"):
            flag = getattr(self, name)
            if flag is not None and not isinstance(flag, bool):
                raise ConfigurationError(f"{name}= must be True, False or None, got {flag!r}")
        for name in ("dsn", "session_dsn", "replica_dsn"):
            dsn = getattr(self, name)
            if dsn is not None and not isinstance(dsn, str):
                kind = type(dsn).__name__
                raise ConfigurationError(f"{name}= must be a DSN string, got {kind}")

    @classmethod
    def resolve(
        cls,
        dsn: str | None,
        *,
        schema: str | None,
        embedded_dir: str | os.PathLike[str] | None = None,
        session_dsn: str | None = None,
        replica_dsn: str | None = None,
        pooled: bool | None = None,
        prepared_statements: bool | None = None,
        environ: Mapping[str, str] | None = None,
        notify_enqueues: bool | None = None,
        notify: str | None = None,
        notify_interval: float | None = None,
    ) -> DatabaseSettings:
        """Explicit values, else the environment: PGTASKS_DSN or DATABASE_URL,
        PGTASKS_SCHEMA (default "pgtasks"), PGTASKS_SESSION_DSN, PGTASKS_REPLICA_DSN,
        PGTASKS_EMBEDDED_DIR (default ./.pgtasks), PGTASKS_NOTIFY (always/off/auto) or
        PGTASKS_NOTIFY_ENQUEUES (true/false; default: always), PGTASKS_NOTIFY_INTERVAL
        (seconds; default 0.2). notify= wins over notify_enqueues=; both given, they
        must agree."""
        environ = os.environ if environ is None else environ
        mode = _notify_setting(notify, notify_enqueues, environ)
        for name, value in (("session_dsn", session_dsn), ("replica_dsn", replica_dsn)):
            if value is not None and not isinstance(value, str):
                raise ConfigurationError(
                    f"{name}= must be a DSN string, got {type(value).__name__}"
                )
        return cls(
            dsn=resolve_dsn(dsn, environ),
            # An explicit schema="" is an error, not a request for the default.
            schema=schema if schema is not None else environ.get("PGTASKS_SCHEMA") or "pgtasks",
            embedded_dir=embedded_data_dir(embedded_dir, environ),
            session_dsn=session_dsn or environ.get(SESSION_DSN_ENVIRONMENT) or None,
            replica_dsn=replica_dsn or environ.get(REPLICA_DSN_ENVIRONMENT) or None,
            pooled=pooled,
            prepared_statements=prepared_statements,
            notify_enqueues=mode != "off",
            notify=mode,
            notify_interval=_notify_interval_setting(notify_interval, environ),
        )


def _notify_interval_setting(value: float | None, environ: Mapping[str, str]) -> float:
    """notify_interval=, else PGTASKS_NOTIFY_INTERVAL, else AUTO_NOTIFY_SPACING."""
    if value is not None:
        return notify_interval(value)
    text = (environ.get(NOTIFY_INTERVAL_ENVIRONMENT) or "").strip()
    if not text:
        return AUTO_NOTIFY_SPACING
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    return notify_interval(number, NOTIFY_INTERVAL_ENVIRONMENT, shown=text)


def _notify_setting(
    notify: str | None, notify_enqueues: bool | None, environ: Mapping[str, str]
) -> str:
    """The notify mode: explicit keywords, else the environment, else "always"."""
    if notify is not None:
        mode = notify_mode(notify)
        if notify_enqueues is not None and notify_enqueues != (mode != "off"):
            raise ConfigurationError(
                f"notify={mode!r} and notify_enqueues={notify_enqueues!r} disagree: give one"
            )
        return mode
    if notify_enqueues is not None:
        if not isinstance(notify_enqueues, bool):
            raise ConfigurationError(
                f"notify_enqueues= must be True or False, got {notify_enqueues!r}"
            )
        return "always" if notify_enqueues else "off"
    text = environ.get(NOTIFY_ENVIRONMENT)
    if text:
        return notify_mode(text, NOTIFY_ENVIRONMENT)
    flag = _flag(NOTIFY_ENQUEUES_ENVIRONMENT, environ.get(NOTIFY_ENQUEUES_ENVIRONMENT))
    return "always" if flag else "off"


def _flag(name: str, text: str | None) -> bool:
    """An environment variable's true/false (unset or empty: True, the default)."""
    value = (text or "").strip().lower()
    if value in ("", "1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(f"{name} must be true or false, got {text!r}")


@dataclasses.dataclass(frozen=True)
class PoolSettings:
    """An App's connection pools: their sizes, how long to wait for a connection and how
    many times an operation is tried on a broken connection."""

    min_size: int = 1
    max_size: int = 10
    connect_timeout: float = 5.0
    connect_attempts: int = 3

    def __post_init__(self) -> None:
        if (
            not isinstance(self.min_size, int)
            or not isinstance(self.max_size, int)
            or not 0 <= self.min_size <= self.max_size
            or self.max_size < 1
        ):
            raise ConfigurationError(
                "need 0 <= pool_min_size <= pool_max_size and pool_max_size >= 1"
            )
        timeout = positive_seconds("connect_timeout=", self.connect_timeout)
        object.__setattr__(self, "connect_timeout", timeout)
        whole_number("connect_attempts=", self.connect_attempts)


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
    detail = " ".join((redact_for(dsn, str(cause)) if cause else "no connection").split())
    # A refusal is known at once; only a wait that ran out took the whole timeout.
    waited = cause is None or "timeout" in type(cause).__name__.lower() or "timeout" in detail
    within = f" within {timeout:g} s" if waited else ""
    return DatabaseUnavailableError(
        f"cannot reach PostgreSQL at {describe_dsn(dsn)}{within}: {detail}"
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


def pinned_options(options: str | None, dsn: str | None = None) -> str:
    """libpq startup ``options`` with the isolation pin last (it wins over a default
    given there), after the options ``dsn`` gives (``?options=`` or ``PGOPTIONS``): a
    keyword argument replaces those in libpq, so they are carried over here."""
    return " ".join(part for part in (dsn_options(dsn), options, PINNED) if part)


def dsn_options(dsn: str | None) -> str | None:
    """The startup options ``dsn`` connects with: its own ``options``, else the
    ``PGOPTIONS`` environment variable's (None: no DSN, or one libpq cannot parse)."""
    if dsn is None:
        return None
    try:
        options = psycopg.conninfo.conninfo_to_dict(dsn).get("options")
    except psycopg.Error:
        return None
    return str(options) if options else os.environ.get("PGOPTIONS") or None


def refuses_startup_options(error: BaseException) -> bool:
    """A pooler (PgBouncer before 1.20, in any pool mode) refused the startup options."""
    return "unsupported startup parameter" in str(error)


def startup_options_refused(dsn: str, error: BaseException) -> ConfigurationError:
    """What to say when ``dsn`` refused pgtasks' startup options (refuses_startup_options):
    it is a pooler, and how to declare it."""
    detail = " ".join(redact_for(dsn, str(error)).split())
    return ConfigurationError(
        f"{describe_dsn(dsn)} refused pgtasks' startup options ({detail}):"
        " it is a connection pooler (PgBouncer). Declare it with"
        " App(dsn=<pooler>, session_dsn=<the server itself>), or App(pooled=True)"
        " when no direct connection is possible (pgtasks then polls)"
    )


def pin_isolation(conn: psycopg.Connection[Any]) -> None:
    """Every pgtasks connection runs READ COMMITTED, whatever the database or role
    default (claims, limits and workflows rely on it).

    A direct connection (``dsn`` not pooled, the session DSN, the replica) is pinned for
    its whole session by a startup option (``default_transaction_isolation``,
    pinned_options). A connection through a transaction pooler cannot be: its statements
    run on whichever server connection the pooler lends, which keeps no session setting of
    ours and accepts no startup option. There each transaction pgtasks opens is pinned
    instead: this sets psycopg's ``isolation_level``, so every explicit transaction begins
    ``BEGIN ISOLATION LEVEL READ COMMITTED`` (no round trip of its own), and the worker's
    round trips of claims and finishes, which run as implicit transactions, begin and end
    their own in the same round trip (Queries.finish_and_claim_jobs). A lone autocommit
    statement (an enqueue, a heartbeat) runs at the server connection's default:
    ``pgtasks doctor``'s pooler check says when that is not READ COMMITTED."""
    conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED


async def apin_isolation(conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.set_isolation_level(psycopg.IsolationLevel.READ_COMMITTED)


def pool_kwargs() -> dict[str, Any]:
    """What every pooled connection is made with (benchmarks' bare loops use it too)."""
    return {"autocommit": True}


def pool_options(pools: PoolSettings, connection_kwargs: dict[str, Any]) -> dict[str, Any]:
    """What a sync and an async pool share: sizes, timeout, autocommit connections with
    ``connection_kwargs``; opened by their owner."""
    return {
        "min_size": pools.min_size,
        "max_size": pools.max_size,
        "kwargs": {**pool_kwargs(), **connection_kwargs},
        "timeout": pools.connect_timeout,
        "open": False,
    }


def embedded_data_dir(
    configured: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None
) -> Path:
    """The embedded server's data directory: explicit, else PGTASKS_EMBEDDED_DIR, else
    ./.pgtasks."""
    environ = os.environ if environ is None else environ
    return Path(configured or environ.get("PGTASKS_EMBEDDED_DIR") or ".pgtasks").resolve()
