"""The operator's texts' basics (pure module: no I/O): durations as pgtasks reads and
prints them, retention and what a prune did, text tables and JSON documents. The values
and listings of pgtasks stats|jobs|workers are in _operations.py."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from ._jobs import JobStatus
from ._text import printable
from ._validation import seconds_at_least_zero

#: What ``parse_duration`` accepts, for error messages and help texts.
DURATION_FORMS = "seconds (90, 1.5) or a number with a unit s, m, h, d or w (30s, 15m, 12h, 1d, 2w)"
#: The word that turns one retention class off in ``pgtasks prune``.
NEVER = "never"

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?|\.\d+)\s*(?P<unit>[smhdw]?)\s*$")


# -- durations ------------------------------------------------------------------------------------
def parse_duration(text: str) -> float:
    """Seconds in ``text``: ``90``, ``1.5``, ``30s``, ``15m``, ``12h``, ``1d`` or ``2w``.

    Raises ValueError naming the accepted forms.
    """
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"invalid duration {text!r}: use {DURATION_FORMS}")
    return float(match["number"]) * _UNITS[match["unit"] or "s"]


def format_duration(seconds: float | None) -> str:
    """A short human duration: ``0.4s``, ``45s``, ``2m05s``, ``1h``, ``3h12m``, ``2d04h``."""
    if seconds is None or math.isnan(seconds):
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        (count, rest), unit, next_unit = divmod(whole, 60), "m", "s"
    elif whole < 86400:
        (count, rest), unit, next_unit = divmod(whole // 60, 60), "h", "m"
    else:
        (count, rest), unit, next_unit = divmod(whole // 3600, 24), "d", "h"
    return f"{count}{unit}{rest:02d}{next_unit}" if rest else f"{count}{unit}"


def retention_seconds(name: str, value: float | None) -> float | None:
    """Validate an ``App(prune_*_after=)`` option: seconds > 0, or 0/None for "never"."""
    if value is None:
        return None
    return seconds_at_least_zero(f"{name}=", value, note=" (0 or None: never prune)") or None


# -- tables and JSON ------------------------------------------------------------------------------
def format_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Columns padded to their widest cell; numeric columns right-aligned."""
    values = [list(row) for row in rows]
    numeric = [
        bool(values) and all(isinstance(row[index], (int, float)) for row in values)
        for index in range(len(headers))
    ]
    # Cells hold names and errors from job rows: escape what a terminal would act on.
    cells = [[printable(str(cell)) for cell in row] for row in values]
    widths = [
        max([len(header), *(len(row[index]) for row in cells)])
        for index, header in enumerate(headers)
    ]

    def line(row: Sequence[str]) -> str:
        parts = [
            cell.rjust(width) if numeric[index] else cell.ljust(width)
            for index, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(list(headers)), *(line(row) for row in cells)])


def _json_default(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, JobStatus):
        return value.value
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def to_json(document: object) -> str:
    """Indented JSON with datetimes as ISO 8601 strings."""
    return json.dumps(document, default=_json_default, indent=2, ensure_ascii=False)


def _timestamp(value: datetime | None) -> str:
    return value.isoformat(sep=" ", timespec="seconds") if value is not None else "-"


def _ago(now: datetime, value: datetime | None) -> str:
    if value is None:
        return "-"
    delta = (now - value).total_seconds()
    return f"{format_duration(delta)} ago" if delta >= 0 else f"in {format_duration(-delta)}"


def _one_line(text: str | None, width: int = 60) -> str:
    """The last non-empty line of an error (the exception, after a traceback), shortened."""
    if not text:
        return ""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return last if len(last) <= width else last[: width - 1] + "…"


# -- pruning --------------------------------------------------------------------------------------
@dataclasses.dataclass
class PruneResult:
    """Rows deleted by one pruning pass, by job status, and worker history rows."""

    deleted: dict[str, int] = dataclasses.field(
        default_factory=lambda: {status: 0 for status in ("done", "failed", "cancelled")}
    )
    worker_history: int = 0
    batches: int = 0
    #: Day partitions of jobs_history dropped (their jobs are in ``deleted``).
    days_dropped: int = 0

    @property
    def total(self) -> int:
        return sum(self.deleted.values())

    def add(self, status: str, count: int) -> None:
        self.deleted[status] = self.deleted.get(status, 0) + count

    def as_json(self) -> dict[str, Any]:
        return {
            "deleted": dict(self.deleted),
            "total": self.total,
            "worker_history": self.worker_history,
            "batches": self.batches,
            "days_dropped": self.days_dropped,
        }


def format_retention(seconds: float | None) -> str:
    if seconds is None:
        return "kept"
    return "0s (all)" if seconds == 0 else format_duration(seconds)


def format_prune(
    result: PruneResult, *, done_after: float | None, failed_after: float | None
) -> str:
    counts = ", ".join(f"{status} {count}" for status, count in result.deleted.items())
    lines = [
        f"pruned {result.total} finished job(s): {counts}"
        f" (retention: done {format_retention(done_after)},"
        f" failed and cancelled {format_retention(failed_after)})"
    ]
    if result.worker_history:
        lines.append(f"forgot {result.worker_history} removed worker(s) older than a day")
    return "\n".join(lines)
