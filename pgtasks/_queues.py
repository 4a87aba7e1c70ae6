"""Paused queues as operators see them (``pgtasks queues list``, the dashboard): pure,
from rows the store layer read."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from ._operations import format_table


# -- paused queues --------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class QueueState:
    """One queue as ``pgtasks queues list`` shows it: unfinished counts and whether it is
    paused. ``paused_at``: when it was paused (None: not paused)."""

    queue: str
    pending: int = 0
    due: int = 0
    running: int = 0
    paused_at: datetime | None = None
    #: Its stored concurrency and rate limits ("concurrency=3 rate=100/m"; "-": none).
    limits: str = "-"

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    def as_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "paused": self.paused,
            "paused_at": self.paused_at,
            "pending": self.pending,
            "due": self.due,
            "running": self.running,
            "limits": self.limits,
        }


def queue_states(
    unfinished: Iterable[Mapping[str, Any]],
    paused: Iterable[Mapping[str, Any]],
    declared: Iterable[str],
    limits: Mapping[str, str] | None = None,
) -> list[QueueState]:
    """Every known queue by name: those with unfinished jobs (rows of
    get_unfinished_stats), the paused ones (rows of get_paused_queues) and ``declared``
    (the queues the app's tasks name); ``limits``: a description of each limited queue's
    stored limits."""
    states: dict[str, dict[str, Any]] = {queue: {} for queue in declared}
    for row in unfinished:
        states.setdefault(row["queue"], {}).update(
            pending=row["pending"], due=row["due"], running=row["running"]
        )
    for row in paused:
        states.setdefault(row["queue"], {})["paused_at"] = row["paused_at"]
    for queue, description in (limits or {}).items():
        states.setdefault(queue, {})["limits"] = description
    return [QueueState(queue, **values) for queue, values in sorted(states.items())]


def format_queues(states: Sequence[QueueState]) -> str:
    if not states:
        return "no queues (no task declares one, no job is unfinished, none is paused)"
    rows = [
        [
            state.queue,
            "paused" if state.paused else "active",
            state.pending,
            state.due,
            state.running,
            state.paused_at.isoformat(sep=" ", timespec="seconds") if state.paused_at else "-",
            state.limits,
        ]
        for state in states
    ]
    return format_table(
        ("QUEUE", "STATE", "PENDING", "DUE", "RUNNING", "PAUSED AT", "LIMITS"), rows
    )
