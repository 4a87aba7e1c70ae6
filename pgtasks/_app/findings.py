"""A finding of ``pgtasks doctor``: a check, its level, what it found and the remedy."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

Row = Mapping[str, Any]

LEVELS = ("ok", "warning", "critical")


@dataclasses.dataclass(frozen=True)
class Finding:
    check: str
    level: str
    summary: str
    remedy: str = ""

    def as_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)
