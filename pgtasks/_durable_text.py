"""How the CLI and the dashboard show durable jobs: the parked state of a pending job and
its steps, every text escaped and cut to a size (docs/howto/durable.md).

Pure module: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ._text import printable, truncate

#: The most bytes of a step's result or error shown in a list of steps.
SHOWN_BYTES = 300
#: A parked job's state by what parked it (the 'pgtasks.parked' meta key's kind).
PARKED_STATES = {"sleep": "sleeping", "event": "waiting", "snooze": "snoozed"}


def parked_state(status: str, meta: Mapping[str, Any] | None) -> str | None:
    """ "sleeping", "waiting" (for an event) or "snoozed" for a pending job parked by a
    durable call; None otherwise."""
    if status != "pending" or not isinstance(meta, Mapping):
        return None
    marker = meta.get("pgtasks.parked")
    if not isinstance(marker, Mapping):
        return None
    return PARKED_STATES.get(str(marker.get("kind")), "parked")


def parked_by_queue(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """count_parked_jobs' rows as ``{queue: {"sleeping": n, "waiting": n, …}}``."""
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        name = PARKED_STATES.get(row["kind"] or "", "parked")
        queue = counts.setdefault(row["queue"], {})
        queue[name] = queue.get(name, 0) + int(row["jobs"])
    return counts


def parked_detail(meta: Mapping[str, Any] | None) -> str:
    """What a parked job waits for, e.g. ``until 2026-…`` or ``event 'order:1' until …``."""
    marker = meta.get("pgtasks.parked") if isinstance(meta, Mapping) else None
    if not isinstance(marker, Mapping):
        return "-"
    parts = []
    if marker.get("kind") == "event":
        parts.append(f"event {str(marker.get('key'))!r}")
    until = marker.get("until")
    if isinstance(until, str):
        parts.append("for ever" if until == "infinity" else f"until {until}")
    return printable(truncate(" ".join(parts) or "-", SHOWN_BYTES))


def shown(value: Any) -> str:
    """A step's result or error as one escaped line of at most SHOWN_BYTES bytes."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return printable(truncate(text, SHOWN_BYTES))


def _time(value: object) -> str:
    return value.isoformat(timespec="milliseconds") if isinstance(value, datetime) else "-"


def _took(step: Mapping[str, Any]) -> str:
    started, finished = step.get("started_at"), step.get("finished_at")
    if isinstance(started, datetime) and isinstance(finished, datetime):
        return f"{(finished - started).total_seconds() * 1000:.1f} ms"
    return "-"


def step_as_json(step: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "position": step.get("position"),
        "name": step.get("name"),
        "occurrence": step.get("occurrence"),
        "status": step.get("status"),
        "attempt": step.get("attempt"),
        "worker_id": step.get("worker_id"),
        "started_at": step.get("started_at"),
        "finished_at": step.get("finished_at"),
        "result": step.get("result"),
        "error": step.get("error"),
    }


def step_rows(steps: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The steps as the dashboard's table shows them: every value escaped and capped."""
    return [
        {
            "position": str((step.get("position") or 0) + 1),
            "name": shown(str(step.get("name"))),
            "occurrence": str(step.get("occurrence")),
            "status": shown(str(step.get("status"))),
            "attempt": str(step.get("attempt")),
            "finished_at": _time(step.get("finished_at")),
            "took": _took(step),
            "result": shown(step.get("error") if step.get("error") else step.get("result")),
        }
        for step in steps
    ]


def format_steps(steps: Sequence[Mapping[str, Any]]) -> str:
    """``pgtasks jobs show``'s steps: one line each (results and errors capped)."""
    if not steps:
        return "steps: -"
    lines = ["steps:"]
    for row in step_rows(steps):
        lines.append(
            f"  {row['position']}. {row['name']} #{row['occurrence']} {row['status']}"
            f" (attempt {row['attempt']}, {row['finished_at']}, {row['took']}): {row['result']}"
        )
    return "\n".join(lines)
