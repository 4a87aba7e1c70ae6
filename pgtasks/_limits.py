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
from typing import Any

from ._operations import format_table

#: Seconds per unit of a rate limit ("100/m").
RATE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([smh])\s*$")
#: A bucket holds at most the tokens of this many seconds (at least one token): a burst
#: of that share after a pause, never more.
BURST_SECONDS = 0.1
#: Largest concurrency or rate count (a 32-bit column).
MAX_LIMIT = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class RateLimit:
    """``count`` jobs per ``period`` seconds across all workers."""

    count: int
    period: float
    text: str

    @property
    def burst(self) -> float:
        """Most tokens the bucket holds (jobs one claim may start after a pause)."""
        return float(max(1, math.floor(self.count / self.period * BURST_SECONDS)))

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
class LimitState:
    """A stored limit as ``pgtasks limits`` shows it, with its running jobs (for a
    per-key limit: the key with the most running jobs, and how many keys run)."""

    name: str
    concurrency: int | None
    rate: str
    tokens: float | None
    running: int = 0
    pending: int = 0
    keys: int = 0

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def limit_states(
    definitions: Iterable[Mapping[str, Any]], usage: Iterable[Mapping[str, Any]]
) -> list[LimitState]:
    """Join rows of get_limits and get_limit_usage: per name, the running and pending jobs
    (for a per-key limit: summed over keys; ``keys`` counts the keys with jobs)."""
    totals: dict[str, list[int]] = {}
    for row in usage:
        total = totals.setdefault(row["name"], [0, 0, 0])
        total[0] += int(row["running"])
        total[1] += int(row["pending"])
        total[2] += 1 if row["key"] is not None else 0
    states = []
    for row in definitions:
        running, pending, keys = totals.get(row["name"], [0, 0, 0])
        states.append(
            LimitState(
                name=row["name"],
                concurrency=row["concurrency"],
                rate=describe_rate(row["rate_count"], row["rate_period"]),
                tokens=row["tokens"],
                running=running,
                pending=pending,
                keys=keys,
            )
        )
    return states


def format_limits(states: Sequence[LimitState], usage: Sequence[Mapping[str, Any]]) -> str:
    if not states:
        return "no limits are stored (a worker stores its app's limits when it starts)"
    rows = [
        [
            state.name,
            state.concurrency if state.concurrency is not None else "-",
            state.rate,
            f"{state.tokens:.2f}" if state.tokens is not None else "-",
            state.running,
            state.pending,
            state.keys if state.name.startswith("key:") else "-",
        ]
        for state in states
    ]
    text = format_table(
        ("LIMIT", "CONCURRENCY", "RATE", "TOKENS", "RUNNING", "PENDING", "KEYS"), rows
    )
    keyed = [row for row in usage if row["key"] is not None and row["running"]]
    if keyed:
        text += "\n\n" + format_table(
            ("LIMIT", "KEY", "RUNNING", "PENDING"),
            [[row["name"], row["key"], row["running"], row["pending"]] for row in keyed],
        )
    return text
