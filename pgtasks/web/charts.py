"""The overview's charts: jobs finished per minute over the last hour, one small chart
per queue, done, failed and cancelled stacked, with axes. Inline SVG computed here (no
JavaScript, no styles beyond the dashboard's stylesheet: the CSP allows nothing inline).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

from .reads import FinishedMinutes

#: Queues drawn (the busiest of the hour); the others are named below the charts.
MAX_CHARTS = 12
#: Geometry of one chart, in SVG units: the plot area and the margins for the axes.
WIDTH, HEIGHT = 360, 96
LEFT, RIGHT, TOP, BOTTOM = 40, 6, 8, 18
#: Minutes back of the x axis' labels (60 minutes ending with the current one).
TICKS = (59, 45, 30, 15, 0)
STATUSES = ("done", "failed", "cancelled")


@dataclasses.dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    status: str
    label: str


@dataclasses.dataclass(frozen=True)
class Tick:
    position: float
    label: str


@dataclasses.dataclass(frozen=True)
class Chart:
    """One queue's chart: ``bars`` (stacked), the axes' ticks, totals for its caption."""

    queue: str
    bars: list[Bar]
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    totals: dict[str, int]
    peak: int
    #: The x position before which minutes were not read (the row cap), or None.
    unread_until: float | None
    width: int = WIDTH
    height: int = HEIGHT
    plot_left: int = LEFT
    plot_right: int = WIDTH - RIGHT
    plot_top: int = TOP
    plot_bottom: int = HEIGHT - BOTTOM


@dataclasses.dataclass(frozen=True)
class Charts:
    charts: list[Chart]
    #: Queues with finished jobs in the hour that are not drawn (beyond MAX_CHARTS).
    hidden: list[str]
    #: The first minute read in full when the row cap was reached (older ones not drawn).
    read_from: datetime | None
    total: int


def _hhmm(value: datetime) -> str:
    return value.astimezone(timezone.utc).strftime("%H:%M")


def _nice_peak(peak: int) -> int:
    """The y axis' top: 1, 2 or 5 times a power of ten, at least ``peak``."""
    if peak <= 1:
        return 1
    magnitude = 1
    while True:
        for step in (1, 2, 5):
            if step * magnitude >= peak:
                return step * magnitude
        magnitude *= 10


def charts(data: FinishedMinutes) -> Charts:
    """Per queue charts of ``data``, the busiest queues first (at most MAX_CHARTS)."""
    minutes = data.minutes
    plot_width = WIDTH - LEFT - RIGHT
    plot_height = HEIGHT - TOP - BOTTOM
    slot = plot_width / max(1, len(minutes))
    x_ticks = [
        Tick(
            round(LEFT + (len(minutes) - 1 - back) * slot + slot / 2, 1), _hhmm(minutes[-back - 1])
        )
        for back in TICKS
        if back < len(minutes)
    ]
    unread_until = None
    if data.read_from is not None and data.read_from in minutes:
        unread_until = round(LEFT + minutes.index(data.read_from) * slot, 1)
    by_total = sorted(
        data.counts.items(), key=lambda item: (-sum(sum(minute) for minute in item[1]), item[0])
    )
    drawn = []
    for queue, series in by_total[:MAX_CHARTS]:
        peak = max((sum(minute) for minute in series), default=0)
        top = _nice_peak(peak)
        bars = []
        for index, counts in enumerate(series):
            base = float(TOP + plot_height)
            for status, count in zip(STATUSES, counts, strict=True):
                if not count:
                    continue
                height = max(1.0, plot_height * count / top)
                base -= height
                bars.append(
                    Bar(
                        x=round(LEFT + index * slot + 0.5, 1),
                        y=round(base, 1),
                        width=round(max(1.0, slot - 1), 1),
                        height=round(height, 1),
                        status=status,
                        label=f"{_hhmm(minutes[index])} UTC: {count:,} {status}",
                    )
                )
        y_ticks = [Tick(float(TOP + plot_height), "0"), Tick(float(TOP), f"{top:,}")]
        if top >= 2:
            y_ticks.insert(1, Tick(round(TOP + plot_height / 2, 1), f"{top / 2:,g}"))
        drawn.append(
            Chart(
                queue=queue,
                bars=bars,
                x_ticks=x_ticks,
                y_ticks=y_ticks,
                totals={
                    status: sum(minute[position] for minute in series)
                    for position, status in enumerate(STATUSES)
                },
                peak=peak,
                unread_until=unread_until,
            )
        )
    return Charts(
        charts=drawn,
        hidden=[queue for queue, _ in by_total[MAX_CHARTS:]],
        read_from=data.read_from,
        total=sum(data.totals),
    )
