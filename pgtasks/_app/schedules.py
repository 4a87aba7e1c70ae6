"""Schedules: declaring them (``@app.periodic``), the job of one tick, and their status
as ``pgtasks schedules`` shows it. Beat (``pgtasks._worker.beat``) runs them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

import psycopg
from typing_extensions import Unpack

from .._cron import (
    DEFAULT_MAX_CATCH_UP,
    PeriodicOptions,
    Schedule,
    default_schedule_name,
    format_tick,
    make_trigger,
    zone_name,
)
from .._errors import TaskRegistrationError
from .._jobs import JobSpec
from .._payload import MAX_KEY_BYTES, check_name
from .._text import printable
from .routing import StoreView
from .uniqueness import Uniqueness, schedule_key

#: Longest schedule name in UTF-8 bytes (a default name holds the task name and the
#: trigger); its tick keys stay well under MAX_KEY_BYTES.
MAX_SCHEDULE_NAME_BYTES = MAX_KEY_BYTES // 2


class ScheduledTask(Protocol):
    """What a schedule reads of its task: its name, its uniqueness and its jobs' spec."""

    @property
    def name(self) -> str: ...

    @property
    def uniqueness(self) -> Uniqueness | None: ...

    def build_spec(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        /,
        *,
        eta: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        idempotency_key: str | None = None,
        meta: Mapping[str, Any] | None = None,
        tick_key: str | None = None,
    ) -> JobSpec: ...


class ScheduledApp(StoreView, Protocol):
    """What the status of the schedules reads of an App."""

    @property
    def schedules(self) -> Mapping[str, Schedule]: ...


def check_periodic_options(options: Mapping[str, Any]) -> None:
    """A TypeError for an option PeriodicOptions does not declare."""
    unknown = set(options) - set(PeriodicOptions.__annotations__)
    if unknown:
        raise TypeError(f"unknown periodic option(s): {', '.join(sorted(unknown))}")


def build_schedule(task: ScheduledTask, **options: Unpack[PeriodicOptions]) -> Schedule:
    """Validate a schedule declaration of a registered task (App.add_periodic checks
    the options' names and the task); every mistake raises here, not later in beat."""
    trigger = make_trigger(options.get("cron"), options.get("every"), options.get("tz"))
    args = options.get("args", ())
    if not isinstance(args, (list, tuple)):
        raise TaskRegistrationError(f"args must be a list or tuple, got {args!r}")
    kwargs = options.get("kwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise TaskRegistrationError(f"kwargs must be a mapping, got {kwargs!r}")
    schedule = Schedule(
        name=options.get("name") or default_schedule_name(task.name, trigger),
        task_name=task.name,
        trigger=trigger,
        args=tuple(args),
        kwargs=dict(kwargs),
        queue=options.get("queue"),
        priority=options.get("priority"),
        catch_up=options.get("catch_up", "latest"),
        max_catch_up=options.get("max_catch_up", DEFAULT_MAX_CATCH_UP),
        meta=options.get("meta") or None,
    )
    # Encode the job once now: bad arguments, queue or priority fail at declaration; the
    # name becomes each tick's idempotency key (name:tick), which must fit its index.
    try:
        check_name("schedule name", schedule.name, MAX_SCHEDULE_NAME_BYTES)
        build_spec(task, schedule, datetime(2000, 1, 1, tzinfo=trigger.zone))
    except (TypeError, ValueError) as error:
        raise TaskRegistrationError(f"schedule {schedule.name!r}: {error}") from error
    return schedule


def build_spec(task: ScheduledTask, schedule: Schedule, tick: datetime) -> JobSpec:
    """The job of one tick: due at the tick, keyed by (schedule name, tick in UTC)."""
    return task.build_spec(
        schedule.args,
        schedule.kwargs,
        eta=tick,
        queue=schedule.queue,
        priority=schedule.priority,
        # The tick's key is unique for life: one job per tick. A task with a uniqueness
        # scope keys that scope with unique_key= or, failing it, the schedule's name.
        idempotency_key=schedule_key(task, schedule.name),
        tick_key=schedule.key(tick),
        meta=schedule.meta,
    )


@dataclasses.dataclass(frozen=True)
class ScheduleStatus:
    """One line of ``pgtasks schedules``: a declared schedule, or stored state only."""

    name: str
    task_name: str | None
    trigger: str | None
    zone: str | None
    next_tick: datetime | None
    #: The next tick on the schedule's wall clock, e.g. ``2024-03-31 03:00:00 CEST``.
    next_tick_local: str | None
    last_tick: datetime | None
    last_job_id: int | None
    processed_until: datetime | None
    declared: bool


def schedule_statuses(
    app: ScheduledApp,
    *,
    run: Callable[[Callable[[psycopg.Connection[Any]], Any]], Any] | None = None,
) -> tuple[datetime, list[ScheduleStatus]]:
    """The database's now and every schedule: declared ones first, then stored-only ones.

    ``run`` runs the read on a connection (default: the App's pool).
    """

    def read(conn: psycopg.Connection[Any]) -> tuple[datetime, list[dict[str, Any]]]:
        return app.queries.get_database_time(conn), app.queries.list_periodic(conn)

    now, rows = (run or app.database.run)(read)
    stored = {row["name"]: row for row in rows}
    statuses = []
    for name, schedule in sorted(app.schedules.items()):
        row = stored.pop(name, {})
        next_tick = schedule.trigger.next_tick(now)
        local = None
        if next_tick is not None:
            wall = next_tick.astimezone(schedule.trigger.zone)
            local = f"{wall:%Y-%m-%d %H:%M:%S} {wall.tzname()}"
        statuses.append(
            ScheduleStatus(
                name=name,
                task_name=schedule.task_name,
                trigger=schedule.trigger.describe(),
                zone=zone_name(schedule.trigger.zone),
                next_tick=next_tick,
                next_tick_local=local,
                last_tick=row.get("last_tick"),
                last_job_id=row.get("last_job_id"),
                processed_until=row.get("processed_until"),
                declared=True,
            )
        )
    for name, row in sorted(stored.items()):
        statuses.append(
            ScheduleStatus(
                name=name,
                task_name=None,
                trigger=None,
                zone=None,
                next_tick=None,
                next_tick_local=None,
                last_tick=row["last_tick"],
                last_job_id=row["last_job_id"],
                processed_until=row["processed_until"],
                declared=False,
            )
        )
    return now, statuses


def format_schedules(now: datetime, statuses: Sequence[ScheduleStatus]) -> str:
    """The table ``pgtasks schedules`` prints."""
    header = ("NAME", "TASK", "SCHEDULE", "NEXT RUN (LOCAL)", "NEXT RUN (UTC)", "LAST TICK (UTC)")
    lines: list[tuple[str, ...]] = [header]
    for status in statuses:
        last = format_tick(status.last_tick) if status.last_tick else "-"
        if status.last_job_id is not None:
            last += f" (job {status.last_job_id})"
        if not status.declared:
            lines.append((status.name, "-", "(not declared in code: ignored)", "-", "-", last))
            continue
        local = status.next_tick_local or "never"
        utc = format_tick(status.next_tick) if status.next_tick else "never"
        lines.append(
            (status.name, status.task_name or "-", status.trigger or "-", local, utc, last)
        )
    # Names come from job rows and schedule rows: escape what a terminal would act on.
    lines = [tuple(printable(cell) for cell in line) for line in lines]
    widths = [max(len(line[column]) for line in lines) for column in range(len(header))]
    text = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]
    text.append(f"database time: {format_tick(now)}")
    return "\n".join(text)


def schedules_as_json(now: datetime, statuses: Sequence[ScheduleStatus]) -> str:
    def encode(value: object) -> object:
        return format_tick(value) if isinstance(value, datetime) else value

    return json.dumps(
        {
            "now": format_tick(now),
            "schedules": [
                {field: encode(value) for field, value in dataclasses.asdict(status).items()}
                for status in statuses
            ],
        },
        indent=2,
    )
