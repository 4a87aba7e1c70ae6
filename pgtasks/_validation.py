"""Checks of numeric options, written once: "a positive number of seconds", "an int >= 1".

Pure module. Each check names the option in its message (``name= must be …, got …``)
and raises the caller's exception class: ConfigurationError for App, Worker and
executor settings, TaskRegistrationError for ``@app.task`` options, ValueError or
TypeError where a public signature promises those.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta

from ._errors import ConfigurationError, NaiveDatetimeError
from ._payload import MAX_KEY_BYTES, MAX_NAME_BYTES, check_name

#: Job priorities and max_attempts are PostgreSQL integers.
PRIORITY_RANGE = (-(2**31), 2**31 - 1)


def _is_number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


def positive_number(
    name: str,
    value: object,
    *,
    unit: str = "",
    error: type[Exception] = ConfigurationError,
) -> float:
    """``value`` as a float when it is a finite number > 0 (``unit``: e.g. " of seconds")."""
    if not _is_number(value) or not 0 < value < math.inf:  # type: ignore[operator]
        raise error(f"{name} must be a positive number{unit}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def positive_seconds(
    name: str, value: object, *, error: type[Exception] = ConfigurationError
) -> float:
    """A finite number of seconds > 0."""
    return positive_number(name, value, unit=" of seconds", error=error)


def seconds_at_least_zero(
    name: str, value: object, *, error: type[Exception] = ConfigurationError, note: str = ""
) -> float:
    """A finite number of seconds >= 0 (``note``: what 0 means, shown in the message)."""
    if not _is_number(value) or not 0 <= value < math.inf:  # type: ignore[operator]
        raise error(f"{name} must be a number of seconds >= 0{note}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def whole_number(
    name: str, value: object, *, minimum: int = 1, error: type[Exception] = ConfigurationError
) -> int:
    """An int (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise error(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


#: Schema names: letters, digits and underscores (any case, reserved words allowed).
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,47}$")


def schema_name(schema: object) -> str:
    """A schema of pgtasks' own: 1-48 letters, digits or underscores, not starting with a
    digit, not ``public``, ``information_schema`` or ``pg_*``."""
    if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
        raise ConfigurationError(
            f"invalid schema name {schema!r}: use 1-48 letters, digits or underscores,"
            " not starting with a digit"
        )
    if schema.lower() in ("public", "information_schema"):
        raise ConfigurationError(
            f"invalid schema name {schema!r}: pgtasks keeps its tables in a schema of its own"
        )
    if schema.lower().startswith("pg_"):
        raise ConfigurationError(f"invalid schema name {schema!r}: the pg_ prefix is reserved")
    return schema


# -- job options: a task's defaults, a call's, a workflow step's ------------------------------
def validate_priority(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"priority must be an int, got {value!r}")
    if not PRIORITY_RANGE[0] <= value <= PRIORITY_RANGE[1]:
        raise ValueError(f"priority must fit in a 32-bit integer, got {value}")
    return value


def validate_text(what: str, value: object) -> str:
    """Queue names and idempotency keys: see check_name (length, NUL, surrogates)."""
    return check_name(what, value, MAX_KEY_BYTES if what == "idempotency_key" else MAX_NAME_BYTES)


def validate_queue(value: object) -> str:
    return validate_text("queue", value)


def validate_max_attempts(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_attempts must be an int >= 1, got {value!r}")
    if value > PRIORITY_RANGE[1]:
        raise ValueError(f"max_attempts must fit in a 32-bit integer, got {value}")
    return value


#: Longest accepted countdown: about 31 years.
MAX_DELAY_SECONDS = 1e9


def validate_delay(what: str, seconds: float) -> float:
    if not math.isfinite(seconds) or abs(seconds) > MAX_DELAY_SECONDS:
        raise ValueError(f"{what} must be a finite number of seconds within ±1e9, got {seconds!r}")
    return seconds


def aware(moment: datetime, what: str) -> datetime:
    if moment.tzinfo is None or moment.tzinfo.utcoffset(moment) is None:
        raise NaiveDatetimeError(
            f"{what} is a naive datetime ({moment.isoformat()}): pgtasks cannot tell which"
            " time zone it is in; pass an aware datetime, e.g."
            " datetime.now(timezone.utc) + timedelta(minutes=5), or a timedelta"
        )
    return moment


def schedule_of(
    countdown: float | timedelta | None, eta: datetime | timedelta | None
) -> tuple[datetime | None, float | None]:
    """``(run_at, delay)``: an absolute aware time, or seconds after the database's now."""
    if countdown is not None and eta is not None:
        raise ValueError("pass countdown= or eta=, not both")
    if eta is not None:
        if isinstance(eta, timedelta):
            return None, validate_delay("eta", eta.total_seconds())
        if isinstance(eta, datetime):
            return aware(eta, "eta"), None
        raise TypeError(f"eta must be an aware datetime or a timedelta, got {eta!r}")
    if countdown is not None:
        if isinstance(countdown, timedelta):
            return None, validate_delay("countdown", countdown.total_seconds())
        if isinstance(countdown, (int, float)) and not isinstance(countdown, bool):
            return None, validate_delay("countdown", float(countdown))
        raise TypeError(f"countdown must be seconds or a timedelta, got {countdown!r}")
    return None, None
