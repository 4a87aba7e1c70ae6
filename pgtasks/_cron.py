"""Periodic schedules: what a schedule enqueues (:class:`Schedule`, the options of
``@app.periodic``) and which of its ticks are due, missed or skipped under its catch-up
policy (:func:`plan_ticks`).

Pure module: no I/O, no database imports; "now" is an argument (beat passes the
database's clock). When a schedule ticks is its trigger's, in _triggers.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, tzinfo
from itertools import islice
from typing import Any, Literal, TypedDict

from ._errors import TaskRegistrationError
from ._triggers import (
    CronTrigger as CronTrigger,
)
from ._triggers import (
    EveryTrigger as EveryTrigger,
)
from ._triggers import (
    Trigger as Trigger,
)
from ._triggers import (
    format_tick as format_tick,
)
from ._triggers import (
    make_trigger as make_trigger,
)
from ._triggers import (
    resolve_zone as resolve_zone,
)
from ._triggers import (
    tick_key as tick_key,
)
from ._triggers import (
    validate_cron as validate_cron,
)
from ._triggers import (
    zone_name as zone_name,
)

CatchUp = Literal["latest", "all", "none"]
CATCH_UP_POLICIES: tuple[CatchUp, ...] = ("latest", "all", "none")

#: At most this many missed ticks are enqueued per schedule with catch_up="all".
DEFAULT_MAX_CATCH_UP = 100

#: A tick at most this old is late, not missed: it is enqueued whatever the policy.
DEFAULT_GRACE = timedelta(seconds=60)


class PeriodicOptions(TypedDict, total=False):
    """Options of ``@app.periodic(...)`` and ``app.add_periodic(task, ...)``."""

    #: Cron expression (5 fields, or 6 with trailing seconds); exclusive with ``every``.
    cron: str
    #: Fixed interval (at least one second); exclusive with ``cron``.
    every: timedelta
    #: Zone the cron expression is read in: an IANA name or a tzinfo (default UTC).
    tz: str | tzinfo
    #: Unique schedule name (default: task name and expression).
    name: str
    #: Positional arguments of every job.
    args: Sequence[Any]
    #: Keyword arguments of every job.
    kwargs: Mapping[str, Any]
    #: Queue of the jobs (default: the task's).
    queue: str
    #: Priority of the jobs (default: the task's).
    priority: int
    #: What to enqueue for ticks missed while no beat ran: "latest", "all" or "none".
    catch_up: CatchUp
    #: Upper bound on the ticks enqueued at once with catch_up="all".
    max_catch_up: int
    #: Meta of every job (a JSON object; see docs/howto/metadata.md).
    meta: Mapping[str, Any]


@dataclasses.dataclass(frozen=True, eq=False)
class Schedule:
    """A periodic job: which task, when, with which arguments and catch-up policy."""

    name: str
    task_name: str
    trigger: Trigger
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    catch_up: CatchUp = "latest"
    max_catch_up: int = DEFAULT_MAX_CATCH_UP
    meta: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise TaskRegistrationError(
                f"schedule name must be a non-empty string, got {self.name!r}"
            )
        if self.catch_up not in CATCH_UP_POLICIES:
            raise TaskRegistrationError(
                f"catch_up must be one of {', '.join(map(repr, CATCH_UP_POLICIES))},"
                f" got {self.catch_up!r}"
            )
        if (
            isinstance(self.max_catch_up, bool)
            or not isinstance(self.max_catch_up, int)
            or self.max_catch_up < 1
        ):
            raise TaskRegistrationError(
                f"max_catch_up must be an int >= 1, got {self.max_catch_up!r}"
            )

    def __repr__(self) -> str:
        return f"<Schedule {self.name!r} {self.trigger.describe()} -> {self.task_name}>"

    def key(self, tick: datetime) -> str:
        return tick_key(self.name, tick)


def default_schedule_name(task_name: str, trigger: Trigger) -> str:
    if isinstance(trigger, CronTrigger):
        zone = zone_name(trigger.zone)
        suffix = "" if zone == "UTC" else f" {zone}"
        return f"{task_name}@{trigger.expression}{suffix}"
    return f"{task_name}@{trigger.describe()}"


@dataclasses.dataclass(frozen=True)
class TickPlan:
    """What beat enqueues for one schedule in one pass."""

    #: Ticks to enqueue, oldest first.
    ticks: tuple[datetime, ...]
    #: True when ticks older than the grace period were found (the schedule missed
    #: ticks while no beat ran); the policy decided which of them are in ``ticks``.
    missed: bool = False


def plan_ticks(
    trigger: Trigger,
    processed_until: datetime,
    now: datetime,
    *,
    catch_up: CatchUp = "latest",
    max_catch_up: int = DEFAULT_MAX_CATCH_UP,
    grace: timedelta = DEFAULT_GRACE,
) -> TickPlan:
    """The ticks to enqueue given that every tick up to ``processed_until`` was handled.

    Ticks no older than ``grace`` are late, not missed, and always enqueued: a takeover
    or a short outage loses nothing. When older ticks exist, ``catch_up`` decides:
    ``"latest"`` enqueues only the most recent tick, ``"all"`` the most recent
    ``max_catch_up`` ticks, ``"none"`` only the ticks within the grace period.
    """
    if processed_until >= now:
        return TickPlan(())
    boundary = now - grace
    recent = tuple(trigger.ascending(max(processed_until, boundary), now))
    if processed_until >= boundary:
        return TickPlan(recent)
    latest_missed = next(trigger.descending(processed_until, boundary), None)
    if latest_missed is None:
        return TickPlan(recent)
    if catch_up == "none":
        return TickPlan(recent, missed=True)
    if catch_up == "latest":
        return TickPlan((recent[-1] if recent else latest_missed,), missed=True)
    newest = list(islice(trigger.descending(processed_until, now), max_catch_up))
    newest.reverse()
    return TickPlan(tuple(newest), missed=True)
