"""When a periodic schedule ticks, as instants in UTC (the schedules themselves: _cron.py).

Pure module: no I/O, no database imports. Every function takes "now" as an argument
(beat passes the database's clock), so nothing here reads the host's clock.

A schedule has a trigger: a cron expression evaluated in a time zone
(:class:`CronTrigger`), or a fixed interval (:class:`EveryTrigger`).

Cron expressions have 5 fields (minute hour day-of-month month day-of-week), or 6
with a trailing seconds field as croniter reads them (``*/10 * * * * 30`` is second
30 of every tenth minute); ``@hourly``-style aliases work too. They are evaluated on
the wall clock of the schedule's zone and converted to UTC with this DST rule:

* **Schedules pinned to hours** (the hour field is not ``*``, e.g. ``30 2 * * *``,
  ``0 9-17 * * 1-5``) follow the wall clock:

  - a time the clock skips (02:30 on the day Europe/Berlin jumps from 02:00 to
    03:00) runs once, at the end of the gap (03:00 local); several skipped times
    of one gap give one tick;
  - a time the clock repeats (02:30 on the day Berlin falls back from 03:00 to
    02:00) runs once, at its first occurrence.

* **Schedules that run every hour** (the hour field is ``*``, e.g. ``*/5 * * * *``,
  ``30 * * * *``) follow elapsed time, so their rhythm never breaks: the skipped
  hour adds no extra run, and the repeated hour runs like any other hour.

Interval triggers (``every=``) ignore zones: their ticks are the multiples of the
interval since 1970-01-01T00:00:00Z, so every beat process computes the same ticks.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone, tzinfo
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ._errors import TaskRegistrationError

if TYPE_CHECKING:
    from croniter import croniter


UTC = timezone.utc


#: How far ahead next_tick() looks before it answers "never".
NEXT_TICK_HORIZON = timedelta(days=5 * 366 + 1)

_SECOND = timedelta(seconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: Offsets are sampled this far apart to find DST transitions (real zones change at
#: most a few times a year), then the transition is bisected to the second.
_SCAN_STEP = timedelta(hours=12)
#: Longer than any DST shift: how far back a fall-back still affects wall times.
_LOOKBACK = timedelta(days=1)
#: A fixed reference for the "does this expression ever match" check at declaration.
_REFERENCE = datetime(2000, 1, 1)


def _as_utc(moment: datetime) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"expected an aware datetime, got {moment.isoformat()}")
    return moment.astimezone(UTC)


def _offset(zone: tzinfo, instant: datetime) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    if offset is None:  # pragma: no cover - astimezone() always gives an aware result
        raise ValueError(f"time zone {zone!r} has no UTC offset at {instant.isoformat()}")
    return offset


def _wall(instant: datetime, offset: timedelta) -> datetime:
    """The naive wall-clock time of ``instant`` at ``offset``."""
    return (instant + offset).replace(tzinfo=None)


def _instant(wall: datetime, offset: timedelta) -> datetime:
    """The UTC instant of a naive wall-clock time read at ``offset``."""
    return (wall - offset).replace(tzinfo=UTC)


def _floor_second(moment: datetime) -> datetime:
    return moment.replace(microsecond=0)


def _ceil_second(moment: datetime) -> datetime:
    floor = _floor_second(moment)
    return floor if floor == moment else floor + _SECOND


def resolve_zone(tz: str | tzinfo | None) -> tzinfo:
    """A tzinfo for an IANA zone name (or a tzinfo, returned as is); None means UTC."""
    if tz is None:
        return UTC
    if isinstance(tz, tzinfo):
        return tz
    if not isinstance(tz, str) or not tz:
        raise TaskRegistrationError(f"tz must be an IANA time zone name, got {tz!r}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise TaskRegistrationError(
            f"unknown time zone {tz!r}: use an IANA name such as 'Europe/Berlin' or 'UTC'"
        ) from None


def zone_name(zone: tzinfo) -> str:
    return getattr(zone, "key", None) or str(zone)


def format_tick(tick: datetime) -> str:
    """A tick as ISO 8601 in UTC with a ``Z`` suffix (microseconds only when non-zero)."""
    tick = _as_utc(tick)
    text = tick.strftime("%Y-%m-%dT%H:%M:%S")
    if tick.microsecond:
        text += f".{tick.microsecond:06d}"
    return text + "Z"


def tick_key(schedule_name: str, tick: datetime) -> str:
    """The idempotency key of a schedule's job for one tick (the tick in UTC)."""
    return f"pgtasks.periodic:{schedule_name}@{format_tick(tick)}"


class Trigger(abc.ABC):
    """When a schedule ticks. Ticks are aware UTC datetimes."""

    zone: tzinfo = UTC

    @abc.abstractmethod
    def describe(self) -> str:
        """The schedule as users wrote it (``cron 30 2 * * * Europe/Berlin``, ``every 5s``)."""

    @abc.abstractmethod
    def ascending(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """Ticks in ``(after, until]``, oldest first."""

    @abc.abstractmethod
    def descending(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """Ticks in ``(after, until]``, newest first."""

    def next_tick(self, after: datetime, horizon: timedelta = NEXT_TICK_HORIZON) -> datetime | None:
        """The first tick after ``after`` (None when there is none within ``horizon``)."""
        return next(self.ascending(after, after + horizon), None)

    def previous_tick(
        self, until: datetime, horizon: timedelta = NEXT_TICK_HORIZON
    ) -> datetime | None:
        """The last tick at or before ``until`` (None when there is none within ``horizon``)."""
        return next(self.descending(until - horizon, until), None)


class EveryTrigger(Trigger):
    """Ticks at the multiples of ``interval`` since the Unix epoch (UTC)."""

    def __init__(self, interval: timedelta) -> None:
        if not isinstance(interval, timedelta):
            raise TaskRegistrationError(f"every= must be a timedelta, got {interval!r}")
        if interval < _SECOND:
            raise TaskRegistrationError(f"every= must be at least one second, got {interval!r}")
        self.interval = interval
        self._step = interval // timedelta(microseconds=1)

    def __repr__(self) -> str:
        return f"<EveryTrigger {self.describe()}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EveryTrigger) and other.interval == self.interval

    def __hash__(self) -> int:
        return hash(self.interval)

    def describe(self) -> str:
        seconds = self.interval.total_seconds()
        return f"every {seconds:g}s"

    def _index(self, moment: datetime) -> int:
        """The number of whole intervals from the epoch to ``moment`` (floor)."""
        elapsed = (_as_utc(moment) - _EPOCH) // timedelta(microseconds=1)
        return elapsed // self._step

    def _tick(self, index: int) -> datetime:
        return _EPOCH + timedelta(microseconds=index * self._step)

    def ascending(self, after: datetime, until: datetime) -> Iterator[datetime]:
        index = self._index(after) + 1
        last = self._index(until)
        while index <= last:
            yield self._tick(index)
            index += 1

    def descending(self, after: datetime, until: datetime) -> Iterator[datetime]:
        index = self._index(until)
        first = self._index(after) + 1
        while index >= first:
            yield self._tick(index)
            index -= 1


@dataclasses.dataclass(frozen=True)
class _Transition:
    """A change of UTC offset at ``at`` (an instant, whole seconds)."""

    at: datetime
    before: timedelta
    after: timedelta

    @property
    def is_gap(self) -> bool:
        """The clock jumps forward: wall times in ``[at+before, at+after)`` do not exist."""
        return self.after > self.before


def _bisect_transition(zone: tzinfo, low: datetime, high: datetime) -> _Transition:
    """The transition in ``(low, high]``, given that the offsets at low and high differ."""
    before = _offset(zone, low)
    low_second = math.floor(low.timestamp())
    high_second = math.ceil(high.timestamp())
    while high_second - low_second > 1:
        middle = (low_second + high_second) // 2
        if _offset(zone, datetime.fromtimestamp(middle, UTC)) == before:
            low_second = middle
        else:
            high_second = middle
    at = datetime.fromtimestamp(high_second, UTC)
    return _Transition(at, before, _offset(zone, at))


def _next_transition(zone: tzinfo, start: datetime, end: datetime) -> _Transition | None:
    """The first offset change in ``(start, end]``."""
    if zone is UTC:
        return None
    low, offset = start, _offset(zone, start)
    while low < end:
        high = min(low + _SCAN_STEP, end)
        if _offset(zone, high) != offset:
            return _bisect_transition(zone, low, high)
        low = high
    return None


def _previous_transition(zone: tzinfo, start: datetime, end: datetime) -> _Transition | None:
    """The last offset change in ``(start, end]`` (the instant the new offset begins)."""
    if zone is UTC:
        return None
    high, offset = end, _offset(zone, end)
    while high > start:
        low = max(high - _SCAN_STEP, start)
        if _offset(zone, low) != offset:
            return _bisect_transition(zone, low, high)
        high = low
    return None


class CronTrigger(Trigger):
    """A cron expression read on the wall clock of ``zone`` (see the module's DST rule)."""

    def __init__(self, expression: str, zone: tzinfo = UTC) -> None:
        self.expression = validate_cron(expression)
        self.zone = zone
        hour_field = _croniter(self.expression).expanded[1]
        #: Every-hour schedules follow elapsed time through DST changes.
        self.follows_elapsed_time = hour_field == ["*"]

    def __repr__(self) -> str:
        return f"<CronTrigger {self.describe()}>"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, CronTrigger)
            and other.expression == self.expression
            and zone_name(other.zone) == zone_name(self.zone)
        )

    def __hash__(self) -> int:
        return hash((self.expression, zone_name(self.zone)))

    def describe(self) -> str:
        return f"cron {self.expression!r} {zone_name(self.zone)}"

    def _walls_forward(self, start: datetime) -> Iterator[datetime]:
        """Matching wall times at or after ``start`` (naive), oldest first."""
        iterator = _croniter(self.expression, _floor_second(start) - _SECOND)
        while True:
            yield iterator.get_next(datetime)

    def _walls_backward(self, end: datetime) -> Iterator[datetime]:
        """Matching wall times at or before ``end`` (naive), newest first."""
        iterator = _croniter(self.expression, _ceil_second(end) + _SECOND)
        while True:
            yield iterator.get_prev(datetime)

    def _matches_in_gap(self, transition: _Transition) -> bool:
        """Whether a wall time the clock skips at ``transition`` matches the expression."""
        first_wall = _wall(transition.at, transition.before)
        last_wall = _wall(transition.at, transition.after)
        return next(self._walls_forward(first_wall)) < last_wall

    def _gap_tick(self, transition: _Transition | None) -> bool:
        return (
            transition is not None
            and transition.is_gap
            and not self.follows_elapsed_time
            and self._matches_in_gap(transition)
        )

    def _repeat_end(self, transition: _Transition | None) -> datetime | None:
        """For wall-clock schedules after a fall-back: walls before this were run already."""
        if transition is None or transition.is_gap or self.follows_elapsed_time:
            return None
        return _wall(transition.at, transition.before)

    def ascending(self, after: datetime, until: datetime) -> Iterator[datetime]:
        after, until = _as_utc(after), _as_utc(until)
        last = after  # ticks are yielded strictly after this
        start = after
        # A fall-back shortly before ``after`` still marks wall times as repeats.
        previous = _previous_transition(self.zone, after - _LOOKBACK, after)
        while True:
            offset = _offset(self.zone, start)
            transition = _next_transition(self.zone, start, until)
            repeat_end = self._repeat_end(previous)
            for wall in self._walls_forward(_wall(start, offset)):
                tick = _instant(wall, offset)
                if (transition is not None and tick >= transition.at) or tick > until:
                    break
                if tick <= last or (repeat_end is not None and wall < repeat_end):
                    continue
                yield tick
                last = tick
            if transition is None:
                return
            if self._gap_tick(transition) and transition.at > last:
                yield transition.at
                last = transition.at
            start, previous = transition.at, transition

    def descending(self, after: datetime, until: datetime) -> Iterator[datetime]:
        after, until = _as_utc(after), _as_utc(until)
        end = until  # this segment's ticks are at or before end ...
        upper = until + timedelta(microseconds=1)  # ... and strictly before upper
        while True:
            offset = _offset(self.zone, end)
            # Look past ``after``: a fall-back shortly before it still marks repeats.
            transition = _previous_transition(self.zone, after - _LOOKBACK, end)
            inside = transition is not None and transition.at > after
            lower = transition.at if transition is not None and inside else after
            repeat_end = self._repeat_end(transition)
            for wall in self._walls_backward(_wall(end, offset)):
                tick = _instant(wall, offset)
                if tick < lower or tick <= after:
                    break
                if tick >= upper or (repeat_end is not None and wall < repeat_end):
                    continue
                yield tick
                upper = tick
            if transition is None or not inside:
                return
            if self._gap_tick(transition) and after < transition.at < upper:
                yield transition.at
            # The previous segment's ticks are before the transition.
            upper = min(upper, transition.at)
            end = transition.at - timedelta(microseconds=1)
            if end <= after:
                return


def _croniter(expression: str, start: datetime | None = None) -> croniter:
    """croniter's iterator, imported on first use: croniter's import runs
    ``platform.architecture()``, which starts the ``file`` command, so processes that
    never read a cron expression (CLI commands, most workers) do not pay for it."""
    from croniter import croniter

    return croniter(expression, start)


def validate_cron(expression: object) -> str:
    """Check a cron expression (5 or 6 fields, or an @alias); returns it normalised."""
    if not isinstance(expression, str) or not expression.strip():
        raise TaskRegistrationError(f"cron must be a non-empty string, got {expression!r}")
    normalised = " ".join(expression.split())
    fields = normalised.split(" ")
    if not normalised.startswith("@") and len(fields) not in (5, 6):
        raise TaskRegistrationError(
            f"invalid cron expression {expression!r}: expected 5 fields"
            " (minute hour day month weekday) or 6 with seconds last, got"
            f" {len(fields)}"
        )
    from croniter import CroniterBadCronError, CroniterBadDateError, CroniterError

    try:
        _croniter(normalised, _REFERENCE).get_next(datetime)
    except CroniterBadDateError:
        raise TaskRegistrationError(
            f"cron expression {expression!r} never matches a date"
        ) from None
    except (CroniterBadCronError, CroniterError, ValueError, KeyError) as error:
        raise TaskRegistrationError(f"invalid cron expression {expression!r}: {error}") from None
    return normalised


def make_trigger(cron: str | None, every: timedelta | None, tz: str | tzinfo | None) -> Trigger:
    if (cron is None) == (every is None):
        raise TaskRegistrationError("a periodic schedule needs exactly one of cron= or every=")
    if every is not None:
        if tz is not None:
            raise TaskRegistrationError(
                "tz= applies to cron= schedules; every= ticks are counted in UTC"
            )
        return EveryTrigger(every)
    return CronTrigger(str(cron), resolve_zone(tz))
