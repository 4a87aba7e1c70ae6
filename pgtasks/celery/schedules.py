"""``crontab`` and ``schedule`` of ``beat_schedule`` entries, as pgtasks periodic
schedules (cron in the app's ``timezone``, or a fixed interval): exactly one job per
tick, whatever the number of beat processes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from .exceptions import ImproperlyConfigured

_DAYS = {
    "sunday": "sun",
    "monday": "mon",
    "tuesday": "tue",
    "wednesday": "wed",
    "thursday": "thu",
    "friday": "fri",
    "saturday": "sat",
}


def _field(value: Any, name: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(str(item) for item in sorted(value))
    if isinstance(value, str) and value.strip():
        text = value.strip().lower()
        if name == "day_of_week":
            for full, short in _DAYS.items():
                text = text.replace(full, short)
        return text.replace(" ", "")
    raise ImproperlyConfigured(f"crontab({name}={value!r}): expected an int, a set or a string")


class crontab:
    """``crontab(minute="*/15", hour="9-17", day_of_week="mon-fri")`` (Celery's defaults:
    every field ``*``)."""

    def __init__(
        self,
        minute: Any = "*",
        hour: Any = "*",
        day_of_week: Any = "*",
        day_of_month: Any = "*",
        month_of_year: Any = "*",
        **kwargs: Any,
    ) -> None:
        if kwargs.get("nowfun") is not None:
            raise ImproperlyConfigured("crontab(nowfun=...) is not supported: beat uses the clock")
        self.minute = _field(minute, "minute")
        self.hour = _field(hour, "hour")
        self.day_of_week = _field(day_of_week, "day_of_week")
        self.day_of_month = _field(day_of_month, "day_of_month")
        self.month_of_year = _field(month_of_year, "month_of_year")

    @property
    def expression(self) -> str:
        """The cron expression: minute hour day-of-month month day-of-week."""
        return (
            f"{self.minute} {self.hour} {self.day_of_month} {self.month_of_year} {self.day_of_week}"
        )

    def __repr__(self) -> str:
        return f"<crontab: {self.expression}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, crontab) and other.expression == self.expression

    def __hash__(self) -> int:
        return hash(self.expression)


class schedule:
    """``schedule(run_every=timedelta(seconds=30))``: a fixed interval."""

    def __init__(self, run_every: float | timedelta | None = None, **kwargs: Any) -> None:
        if run_every is None:
            raise ImproperlyConfigured("schedule(run_every=...) needs an interval")
        self.run_every = every_of(run_every)

    def __repr__(self) -> str:
        return f"<freq: {self.run_every}>"


class solar:
    """Celery's solar schedules are not supported: refused when built."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise ImproperlyConfigured(
            "solar schedules are not supported by pgtasks beat: use crontab() at the times you need"
        )


def every_of(value: Any) -> timedelta:
    if isinstance(value, timedelta):
        interval = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        interval = timedelta(seconds=float(value))
    else:
        raise ImproperlyConfigured(f"schedule interval {value!r}: expected seconds or a timedelta")
    if interval < timedelta(seconds=1):
        raise ImproperlyConfigured(
            f"schedule interval {value!r}: pgtasks beat runs schedules of one second or more"
        )
    return interval


def periodic_options(value: Any, timezone: Any) -> dict[str, Any]:
    """pgtasks' ``add_periodic`` options of a ``beat_schedule`` entry's ``schedule``."""
    if isinstance(value, crontab):
        options: dict[str, Any] = {"cron": value.expression}
        if timezone:
            options["tz"] = timezone
        return options
    if isinstance(value, schedule):
        return {"every": value.run_every}
    return {"every": every_of(value)}
