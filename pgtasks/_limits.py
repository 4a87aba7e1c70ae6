"""Concurrency and rate limits: parsing, validation, definition names, and how
``pgtasks limits`` shows them. Pure module (see docs/howto/flow-control.md).

A limit is stored under a name: ``queue:<queue>``, ``task:<task>`` (the task as a whole)
or ``key:<task>`` (concurrency per concurrency key). A job carries the sorted instances of
the limits that apply to it: a name, or for a per-key limit the name, SEPARATOR and the
job's key (the database finds the limit's row by the part before the first separator).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from ._operations import format_table

#: Seconds per unit of a rate limit ("100/m").
RATE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([smh])\s*$")
#: A bucket holds the tokens of this many seconds, and at least one token plus those of
#: LATENESS_SECONDS (at most two tokens): a burst of that share after a pause, never more.
BURST_SECONDS = 0.1
#: How late a worker may ask for its next token (it wakes when the token is due, but its
#: claim takes a moment and a loaded machine answers late) without the rate losing it.
LATENESS_SECONDS = 0.25
#: Largest concurrency or rate count (a 32-bit column).
MAX_LIMIT = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class RateLimit:
    """``count`` jobs per ``period`` seconds across all workers."""

    count: int
    period: float
    text: str

    @property
    def per_second(self) -> float:
        return self.count / self.period

    @property
    def burst(self) -> float:
        """Most tokens the bucket holds: the tokens of BURST_SECONDS, and at least one plus
        those of LATENESS_SECONDS (at most two), so that a claim a little late still finds
        the token it waited for and the declared rate is reached ("5/s": 2, "1/s": 1.25,
        "1/h": a little over 1, "200/s": 20). ``floor(burst)`` jobs may start at once after
        a pause; in any window of T seconds at most ``burst + rate * T`` start."""
        rate = self.per_second
        slack = 1.0 + min(1.0, rate * LATENESS_SECONDS)
        return float(max(slack, math.floor(rate * BURST_SECONDS)))

    def __str__(self) -> str:
        return self.text


def parse_rate_limit(what: str, value: object) -> RateLimit:
    """``"100/m"``, ``"5/s"``, ``"1000/h"`` or ``"10/30s"``; ValueError otherwise."""
    if not isinstance(value, str):
        raise ValueError(
            f"{what} must be a string like '100/m' (jobs per s, m or h), got {value!r}"
        )
    match = _RATE.match(value)
    if match is None:
        raise ValueError(
            f"{what} must look like '100/m', '5/s', '1000/h' or '10/30s' (jobs per period),"
            f" got {value!r}"
        )
    count = int(match[1])
    multiple = int(match[2]) if match[2] else 1
    if not 1 <= count <= MAX_LIMIT or multiple < 1:
        raise ValueError(f"{what} must allow at least one job per period, got {value!r}")
    period = multiple * RATE_UNITS[match[3]]
    return RateLimit(count, period, value.strip())


def check_concurrency(what: str, value: object) -> int:
    """An int from 1 to 2**31-1; ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise ValueError(
            f"{what} must be an int >= 1 (the most jobs running at once), got {value!r}"
        )
    return value


#: Between a per-key limit's name and the key in a job's limit instance (ASCII unit
#: separator: no limit name may hold it).
SEPARATOR = "\x1f"


def check_limit_target(what: str, name: str) -> None:
    """A task or queue under a limit must not have SEPARATOR in its name."""
    if SEPARATOR in name:
        raise ValueError(f"{what} {name!r} holds the character \\x1f, which limits reserve")


def key_instance(task: str, key: str) -> str:
    """The instance of a per-key limit for one key."""
    return f"{key_limit_name(task)}{SEPARATOR}{key}"


def queue_limit_name(queue: str) -> str:
    return f"queue:{queue}"


def task_limit_name(task: str) -> str:
    return f"task:{task}"


def key_limit_name(task: str) -> str:
    return f"key:{task}"


@dataclasses.dataclass(frozen=True)
class LimitDefinition:
    """One stored limit: concurrency (jobs running at once) and/or a rate."""

    name: str
    concurrency: int | None = None
    rate: RateLimit | None = None

    def as_params(self) -> tuple[str, int | None, int | None, float | None, float]:
        rate = self.rate
        return (
            self.name,
            self.concurrency,
            rate.count if rate else None,
            rate.period if rate else None,
            rate.burst if rate else 1.0,
        )


def describe_limit(row: Mapping[str, Any]) -> str:
    """``concurrency=3 rate=100/m`` of a row of get_limits."""
    parts = []
    if row["concurrency"] is not None:
        parts.append(f"concurrency={row['concurrency']}")
    if row["rate_count"] is not None:
        parts.append(f"rate={describe_rate(row['rate_count'], row['rate_period'])}")
    return " ".join(parts) or "-"


def describe_rate(count: int | None, period: float | None) -> str:
    if count is None or period is None:
        return "-"
    for unit, seconds in RATE_UNITS.items():
        if period == seconds:
            return f"{count}/{unit}"
    return f"{count}/{period:g}s"


@dataclasses.dataclass(frozen=True)
class KeyUsage:
    """One key of a per-key limit: its running, pending and due jobs, and the due jobs the
    limit holds back now."""

    key: str
    running: int
    pending: int
    due: int
    held: int

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class LimitState:
    """A limit as operators read it (``pgtasks limits``, the dashboard): what it allows,
    what runs under it now, and what it holds back.

    ``kind`` is ``queue``, ``task`` or ``key`` (concurrency per key) and ``target`` the
    queue or task it applies to. ``tokens`` are the rate's tokens now (None without a rate)
    and ``next_token_in`` the seconds until the next whole one. ``held``: due jobs under it
    that it keeps from starting now (no room, or no whole token). For a per-key limit the
    counts are summed over its keys, ``keys`` counts the keys with jobs, and ``top_keys``
    are those with the most running, then pending, jobs. ``stored`` is False for a limit
    that jobs name but that no worker stored (its jobs run without it).
    """

    name: str
    kind: str
    target: str
    concurrency: int | None
    rate: str
    rate_per_second: float | None = None
    burst: float | None = None
    tokens: float | None = None
    next_token_in: float | None = None
    running: int = 0
    pending: int = 0
    due: int = 0
    held: int = 0
    keys: int = 0
    top_keys: tuple[KeyUsage, ...] = ()
    stored: bool = True
    updated_at: datetime | None = None
    #: Whether the app declares it (False: an operator set it on an undeclared target).
    declared: bool = True
    #: What the app declares (``concurrency=3 rate=10/s``), when an operator changed it.
    declared_text: str | None = None
    #: Who changed it at runtime, and when (None: the app's declaration applies).
    overridden_by: str | None = None
    overridden_at: datetime | None = None
    #: Paused by an operator: no job under it starts.
    paused: bool = False

    def as_json(self) -> dict[str, Any]:
        document = dataclasses.asdict(self)
        document["top_keys"] = [key.as_json() for key in self.top_keys]
        return document


#: The limit the first fair job of a schema stores (no concurrency, no rate): while any
#: limit is stored, workers run the limited claim, which claims fair jobs.
FAIR_LIMIT = "fair:"


def limit_kind(name: str) -> tuple[str, str]:
    """``(kind, target)`` of a limit name: ``queue:reports`` is ("queue", "reports");
    FAIR_LIMIT is ("fair", "")."""
    if name == FAIR_LIMIT:
        return "fair", ""
    kind, _, target = name.partition(":")
    return (kind, target) if kind in ("queue", "task", "key") and target else ("other", name)


def limit_states(
    definitions: Iterable[Mapping[str, Any]],
    usage: Iterable[Mapping[str, Any]],
    top_keys: Iterable[Mapping[str, Any]] = (),
) -> list[LimitState]:
    """Join rows of get_limits, get_limit_usage and get_limit_top_keys, by limit name;
    limits that jobs name but that are not stored come last (``stored`` False)."""
    used = {row["name"]: row for row in usage}
    keys: dict[str, list[KeyUsage]] = {}
    for row in top_keys:
        keys.setdefault(row["name"], []).append(
            KeyUsage(
                key=row["key"],
                running=int(row["running"]),
                pending=int(row["pending"]),
                due=int(row["due"]),
                held=int(row["held"]),
            )
        )
    states = []
    seen = set()
    for row in definitions:
        name = row["name"]
        seen.add(name)
        states.append(_state(name, row, used.get(name), keys.get(name, ())))
    for name in sorted(set(used) - seen):
        states.append(_state(name, None, used[name], keys.get(name, ())))
    return states


def _state(
    name: str,
    definition: Mapping[str, Any] | None,
    usage: Mapping[str, Any] | None,
    top_keys: Sequence[KeyUsage],
) -> LimitState:
    kind, target = limit_kind(name)
    count = definition["rate_count"] if definition else None
    period = definition["rate_period"] if definition else None
    return LimitState(
        name=name,
        kind=kind,
        target=target,
        concurrency=definition["concurrency"] if definition else None,
        rate=describe_rate(count, period),
        rate_per_second=count / period if count is not None and period else None,
        burst=definition["burst"] if definition else None,
        tokens=definition["tokens"] if definition else None,
        next_token_in=definition["next_token_in"] if definition else None,
        running=int(usage["running"]) if usage else 0,
        pending=int(usage["pending"]) if usage else 0,
        due=int(usage["due"]) if usage else 0,
        held=int(usage["held"]) if usage and definition else 0,
        keys=int(usage["keys"]) if usage else 0,
        top_keys=tuple(top_keys),
        stored=definition is not None,
        updated_at=definition["updated_at"] if definition else None,
        **_runtime(definition),
    )


def _runtime(definition: Mapping[str, Any] | None) -> dict[str, Any]:
    """The fields of a runtime change (migration runtime_controls) of a get_limits row."""
    if definition is None or "overridden_at" not in definition:
        return {}
    overridden = definition["overridden_at"] is not None
    declared = definition["declared"] is not False
    declared_text = None
    if overridden and declared:
        declared_text = describe_limit(
            {
                "concurrency": definition["declared_concurrency"],
                "rate_count": definition["declared_rate_count"],
                "rate_period": definition["declared_rate_period"],
            }
        )
    return {
        "declared": declared,
        "declared_text": declared_text,
        "overridden_by": definition["overridden_by"] if overridden else None,
        "overridden_at": definition["overridden_at"],
        "paused": bool(definition["paused"]),
    }


def _label(state: LimitState) -> str:
    if not state.stored:
        return f"{state.name} (not stored)"
    marks = []
    if state.paused:
        marks.append("paused")
    if not state.declared:
        marks.append("set at runtime")
    elif state.overridden_at is not None:
        marks.append(f"changed at runtime; declared {state.declared_text}")
    return f"{state.name} ({', '.join(marks)})" if marks else state.name


def format_limits(states: Sequence[LimitState]) -> str:
    if not states:
        return "no limits are stored (a worker stores its app's limits when it starts)"
    rows = [
        [
            _label(state),
            state.concurrency if state.concurrency is not None else "-",
            state.rate,
            f"{state.tokens:.2f}" if state.tokens is not None else "-",
            state.running,
            state.pending,
            state.held,
            state.keys if state.kind == "key" else "-",
        ]
        for state in states
    ]
    text = format_table(
        ("LIMIT", "CONCURRENCY", "RATE", "TOKENS", "RUNNING", "PENDING", "HELD", "KEYS"), rows
    )
    keyed = [(state.name, key) for state in states for key in state.top_keys]
    if keyed:
        text += "\n\n" + format_table(
            ("LIMIT", "KEY", "RUNNING", "PENDING", "HELD"),
            [[name, key.key, key.running, key.pending, key.held] for name, key in keyed],
        )
    text += (
        "\n\nHELD: due jobs the limit keeps from starting now (no free slot, or no whole"
        " token); KEYS: keys with jobs (the busiest are listed below)"
    )
    return text
