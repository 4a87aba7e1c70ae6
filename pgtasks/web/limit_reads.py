"""What the dashboard's limits page reads: every concurrency and rate limit as ``pgtasks
limits`` reads it (:func:`pgtasks._app.admin.read_limits`: capacity, rate, tokens now,
running, pending, due and held jobs, the busiest keys of a per-key limit), and what the
page marks besides: limits jobs name that no worker stored, values written by hand past
the table's checks, names pgtasks does not write, limits this app does not declare, and
pending jobs under more limit instances than a claim takes. On the dashboard's own
connections (:class:`~pgtasks.web.reads.DashboardDatabase`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg

from .._app import admin
from .._limits import LimitDefinition, LimitState, describe_rate
from .reads import DashboardDatabase

if TYPE_CHECKING:
    from .._app.app import App

#: Keys of a per-key limit the page lists by default (the busiest), and at most (?keys=).
TOP_KEYS = 10
MAX_TOP_KEYS = 200
#: Limits the page lists at most (jobs written by hand may name thousands).
LIMIT_ROWS = 200

#: The kinds the page's tabs filter by (``?kind=``), with their labels.
KINDS = {
    "task": "Task concurrency",
    "queue": "Queue concurrency",
    "key": "Keyed concurrency",
    "rate": "Rate",
}


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


@dataclasses.dataclass(frozen=True)
class LimitView:
    """One limit as the page shows it: its state and what the page says about it."""

    state: LimitState
    #: What it limits: "task concurrency", "queue rate", "keyed concurrency", …
    kinds: tuple[str, ...]
    #: What is wrong with it, said plainly (empty for a sound limit).
    problems: tuple[str, ...] = ()
    #: What this app declares for it when that differs from what is stored (else None).
    declared: str | None = None

    @property
    def name(self) -> str:
        return self.state.name

    def matches(self, kind: str | None) -> bool:
        state = self.state
        if kind is None:
            return True
        if kind == "rate":
            return state.rate != "-"
        if kind == "key":
            return state.kind == "key"
        return state.kind == kind and state.concurrency is not None

    @property
    def capacity(self) -> str:
        """How many of its jobs may run at once ("3", "3 per key"), or "-"."""
        concurrency = self.state.concurrency
        if concurrency is None:
            return "-"
        return f"{concurrency:,} per key" if self.state.kind == "key" else f"{concurrency:,}"

    @property
    def running_fraction(self) -> float | None:
        """Running jobs over the capacity (a limit, not a per-key one, with a capacity)."""
        state = self.state
        if state.kind == "key" or state.concurrency is None or state.concurrency < 1:
            return None
        return min(1.0, state.running / state.concurrency)

    @property
    def has_rate(self) -> bool:
        return self.state.rate != "-"

    @property
    def token_interval(self) -> float | None:
        """Seconds between two tokens of its rate (None: no rate, or not a finite one)."""
        per_second = self.state.rate_per_second
        if not _finite(per_second) or not per_second or per_second <= 0:
            return None
        return 1 / per_second

    @property
    def token_fraction(self) -> float | None:
        """Tokens now over the bucket's size (its burst), for a bar."""
        tokens, burst = self.state.tokens, self.state.burst
        if tokens is None or burst is None or not _finite(tokens) or not _finite(burst):
            return None
        return max(0.0, min(1.0, tokens / burst)) if burst > 0 else None


@dataclasses.dataclass(frozen=True)
class LimitsPage:
    """The limits page: the limits (filtered, at most LIMIT_ROWS), how many there are in
    all, and the pending jobs no claim takes for their limit instances."""

    now: datetime
    limits: list[LimitView]
    #: Limits of the filter in all (the page lists LIMIT_ROWS of them at most).
    total: int
    #: Limits per tab (``KINDS``; "" for all).
    counts: dict[str, int]
    top_keys: int
    #: Pending jobs under more than 8 limit instances, and the first of them.
    overlimited: int = 0
    first_overlimited: int | None = None

    @property
    def hidden(self) -> int:
        return max(0, self.total - len(self.limits))


def _kinds(state: LimitState) -> tuple[str, ...]:
    if state.kind == "other":
        return ("unknown kind",)
    kinds = []
    if state.concurrency is not None:
        kinds.append("keyed concurrency" if state.kind == "key" else f"{state.kind} concurrency")
    if state.rate != "-":
        kinds.append("rate" if state.kind == "key" else f"{state.kind} rate")
    return tuple(kinds) or ("no limit",)


def _problems(state: LimitState, bad_values: set[str], declared: bool | None) -> list[str]:
    problems = []
    if not state.stored:
        problems.append(
            "not stored: jobs name this limit, but no worker stored it, so they run without"
            " it (a worker stores its app's limits when it starts)"
        )
    if state.name in bad_values:
        problems.append(
            "values written by hand past the limits table's checks: the claim clamps them"
            " (pgtasks doctor names them; a worker's start stores its app's values again)"
        )
    numbers = (state.rate_per_second, state.burst, state.tokens, state.next_token_in)
    if any(value is not None and not math.isfinite(value) for value in numbers):
        problems.append("a value is not a finite number")
    if state.concurrency is not None and state.concurrency < 1:
        problems.append("a concurrency below 1")
    if state.kind == "other":
        problems.append("not a name pgtasks writes (queue:…, task:… or key:…)")
    if declared is False and state.stored:
        problems.append("not declared by this app's tasks or queues (another app stored it)")
    return problems


def _described(concurrency: int | None, rate: str) -> str:
    """``concurrency=3 rate=5/s`` (as describe_limit), or "-"."""
    parts = [f"concurrency={concurrency}"] if concurrency is not None else []
    if rate != "-":
        parts.append(f"rate={rate}")
    return " ".join(parts) or "-"


def limit_views(
    states: Iterable[LimitState],
    definitions: Iterable[LimitDefinition],
    bad_values: Iterable[str] = (),
) -> list[LimitView]:
    """The views of ``states``, marked against this app's ``definitions`` (empty: the app
    declares no limit, so none is marked as undeclared)."""
    declared: Mapping[str, str] = {
        definition.name: _described(
            definition.concurrency,
            describe_rate(definition.rate.count, definition.rate.period)
            if definition.rate
            else "-",
        )
        for definition in definitions
    }
    bad = set(bad_values)
    views = []
    for state in states:
        known = state.name in declared if declared else None
        differs = None
        if (
            known
            and state.stored
            and _described(state.concurrency, state.rate) != (declared[state.name])
        ):
            differs = declared[state.name]
        views.append(
            LimitView(
                state=state,
                kinds=_kinds(state),
                problems=tuple(_problems(state, bad, known)),
                declared=differs,
            )
        )
    return views


def limits_page(
    app: App,
    database: DashboardDatabase,
    *,
    kind: str | None = None,
    name: str | None = None,
    top_keys: int = TOP_KEYS,
) -> LimitsPage:
    """The limits of ``kind`` (a key of KINDS, or all) or the one named ``name``, with the
    ``top_keys`` busiest keys of each per-key limit."""

    def read(conn: psycopg.Connection[Any]) -> tuple[datetime, list[LimitState], Any]:
        states = admin.read_limits(app, conn, top_keys=top_keys)
        anomalies = database.store.get_limit_anomalies(conn)
        return database.store.get_database_time(conn), states, anomalies

    now, states, anomalies = database.run(read)
    views = limit_views(states, app.limit_definitions(), anomalies["bad_values"] or ())
    counts = {"": len(views)}
    for tab in KINDS:
        counts[tab] = sum(view.matches(tab) for view in views)
    chosen = [view for view in views if view.matches(kind) and (name is None or view.name == name)]
    return LimitsPage(
        now=now,
        limits=chosen[:LIMIT_ROWS],
        total=len(chosen),
        counts=counts,
        top_keys=top_keys,
        overlimited=int(anomalies["overlimited"] or 0),
        first_overlimited=anomalies["first_overlimited"],
    )
