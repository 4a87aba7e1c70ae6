"""A figure of the benchmarks: a measurement repeated over runs, printed and written as
its median with the smallest and largest run."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any


class Figure:
    def __init__(self, name: str, unit: str, values: list[float], note: str = "") -> None:
        self.name, self.unit, self.values, self.note = name, unit, values, note

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "median": self.median,
            "min": min(self.values),
            "max": max(self.values),
            "runs": self.values,
            "note": self.note,
        }

    def row(self) -> str:
        fmt = "{:,.2f}" if self.unit == "ms" else "{:,.0f}"
        median, low, high = (
            fmt.format(v) for v in (self.median, min(self.values), max(self.values))
        )
        return f"{self.name:52} {median:>10} {self.unit:6} [{low} .. {high}] {self.note}"


def repeat(runs: int, measure: Callable[[], float]) -> list[float]:
    return [measure() for _ in range(runs)]
