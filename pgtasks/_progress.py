"""Progress a task reports and the meta patches a task writes (JobContext.set_progress,
JobContext.update_meta), as values. Pure module: no I/O."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ._errors import PayloadNotSerializableError, ReservedMetaKeyError
from ._payload import RESERVED_META_PREFIX

#: The meta key of the progress a task reports (JobContext.set_progress).
PROGRESS_KEY = "pgtasks.progress"


@dataclasses.dataclass(frozen=True)
class Progress:
    """What ``ctx.set_progress(current, total, message)`` stored last."""

    current: float
    total: float | None
    message: str | None
    updated_at: datetime | None

    @property
    def fraction(self) -> float | None:
        """current / total, or None without a (positive) total or when it is not finite."""
        if not self.total:
            return None
        fraction = self.current / self.total
        return fraction if math.isfinite(fraction) else None

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> Progress | None:
        """The progress in ``meta``; None when there is none, or when its current value is
        not a finite number a float holds (a row written by hand: an integer of 400 digits, or
        ``1e400``, which reads as infinity). A total that is not such a number is left out."""
        value = meta.get(PROGRESS_KEY)
        if not isinstance(value, dict):
            return None
        message = value.get("message")
        current, total = _finite(value.get("current")), _finite(value.get("total"))
        if current is None:
            return None
        return cls(
            current=current,
            total=total,
            message=message if isinstance(message, str) else None,
            updated_at=_parse_time(value.get("updated_at")),
        )


def _finite(value: Any) -> float | None:
    """``value`` as a finite int or float, else None (bools, text, ints past a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(number) else None


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def check_meta_patch(patch: dict[str, Any]) -> dict[str, Any]:
    """A user's meta update: string keys, none reserved (values are checked when encoded)."""
    for key in patch:
        if not isinstance(key, str):
            raise PayloadNotSerializableError(f"meta key {key!r} is not a string")
        if key.startswith(RESERVED_META_PREFIX):
            raise ReservedMetaKeyError(
                f"meta key {key!r} starts with {RESERVED_META_PREFIX!r}, a prefix reserved"
                " for pgtasks (use set_progress() for progress); choose another key"
            )
    return patch


def progress_patch(current: float, total: float | None, message: str | None) -> dict[str, Any]:
    """The meta patch of one progress report (validated: finite numbers, text message)."""
    for name, value in (("current", current), ("total", total)):
        if value is None and name == "total":
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise ValueError(f"set_progress: {name} must be a finite number, got {value!r}")
    if message is not None and not isinstance(message, str):
        raise TypeError(f"set_progress: message must be a string, got {type(message).__name__}")
    return {
        PROGRESS_KEY: {
            "current": current,
            "total": total,
            "message": message,
            "updated_at": datetime.now(timezone.utc).isoformat(),
        }
    }
