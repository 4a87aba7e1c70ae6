"""A job's captured log lines (meta "pgtasks.logs", see pgtasks/_execution/joblogs.py) as
its page shows them: every value checked, escaped and capped (a row written by hand may
hold anything there)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import Any

from .._text import storable

#: Attempts whose lines a job page shows at most (the newest), and lines per attempt.
ATTEMPTS_SHOWN = 10
LINES_SHOWN = 500
#: Characters of one line shown at most.
LINE_CHARS = 5000


@dataclasses.dataclass(frozen=True)
class LogLine:
    at: str
    level: str
    logger: str
    text: str


@dataclasses.dataclass(frozen=True)
class AttemptLines:
    """One attempt's lines; ``dropped``: lines not kept (over the caps when captured)."""

    attempt: int
    lines: list[LogLine]
    dropped: int


def _text(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else "" if value is None else str(value)
    return storable(text[:limit])


def _time(value: Any) -> str:
    """A line's time (seconds since the epoch) in UTC, to the millisecond."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            moment = datetime.fromtimestamp(value, timezone.utc)
        except (OverflowError, OSError, ValueError):
            return _text(value, 40)
        return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"
    return _text(value, 40)


def _line(item: Any) -> LogLine | None:
    if not isinstance(item, list) or len(item) != 4:
        return None
    at, level, logger, text = item
    return LogLine(_time(at), _text(level, 20), _text(logger, 200), _text(text, LINE_CHARS))


def attempt_lines(value: Any) -> list[AttemptLines]:
    """The attempts of ``value`` (the "pgtasks.logs" object), newest first."""
    if not isinstance(value, dict):
        return []
    attempts = []
    for key, entry in value.items():
        if not (isinstance(key, str) and key.isascii() and key.isdigit() and len(key) < 10):
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("lines"), list):
            continue
        lines = [line for line in map(_line, entry["lines"][:LINES_SHOWN]) if line is not None]
        dropped = entry.get("dropped")
        count = dropped if isinstance(dropped, int) and not isinstance(dropped, bool) else 0
        hidden = max(0, len(entry["lines"]) - LINES_SHOWN)
        attempts.append(AttemptLines(int(key), lines, max(0, count) + hidden))
    attempts.sort(key=lambda attempt: attempt.attempt, reverse=True)
    return attempts[:ATTEMPTS_SHOWN]
