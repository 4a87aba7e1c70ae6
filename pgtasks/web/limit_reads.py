"""What the dashboard's limits page reads: every concurrency and rate limit as ``pgtasks
limits`` shows it (:class:`~pgtasks._limits.LimitState`: capacity, rate, tokens now,
running, pending, due and held jobs, the busiest keys of a per-key limit), and what the
page marks besides: limits jobs name that no worker stored, values written by hand past
the table's checks, names pgtasks does not write, limits this app does not declare, and
pending jobs under more limit instances than a claim takes. On the dashboard's own
connections (:class:`~pgtasks.web.reads.DashboardDatabase`).

The definitions are ``pgtasks limits``' (``get_limits``: tokens now, clamped as the claim
clamps them). The jobs are counted per limit instance by ``get_limit_instances``: every
running limited job, and the first LIMITED_SCAN pending ones in claim order (``pgtasks
limits`` counts every pending one: a heap row each, 0.25 s for 30,000 spread over a
table of 1,000,000). When the backlog is longer, the page says that its pending, due and
held counts are those of the jobs next in line. What a limit holds back is computed here
as ``get_limit_usage`` computes it: the due jobs past its free slots and whole tokens.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg

from .._app.flow_stats import FlowStats, read_flow
from .._app.keyed_admin import KeyedState, keyed_state
from .._limits import SEPARATOR, LimitDefinition, LimitState, describe_rate, limit_states
from .reads import DashboardDatabase

if TYPE_CHECKING:
    from .._app.app import App

#: Keys of a per-key limit the page lists by default (the busiest), and at most (?keys=).
TOP_KEYS = 10
MAX_TOP_KEYS = 200
#: Limits the page lists at most (jobs written by hand may name thousands).
LIMIT_ROWS = 200
#: Pending limited jobs the page counts at most (the next ones in claim order).
LIMITED_SCAN = 5_000

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
    #: Pending limited jobs counted (at most LIMITED_SCAN, the next ones in claim order).
    pending_read: int = 0
    #: Those under more than 8 limit instances (counted in no limit), and the first.
    overlimited: int = 0
    first_overlimited: int | None = None
    #: Debounced jobs and batch tasks (flow_stats.py).
    flow: FlowStats | None = None
    #: The busiest and starved fair keys and the sequences.
    keyed: KeyedState | None = None

    @property
    def hidden(self) -> int:
        return max(0, self.total - len(self.limits))

    @property
    def capped(self) -> bool:
        """LIMITED_SCAN pending limited jobs were read: there may be more."""
        return self.pending_read >= LIMITED_SCAN


def _kinds(state: LimitState) -> tuple[str, ...]:
    if state.kind == "other":
        return ("unknown kind",)
    if state.kind == "fair":
        return ("fair queuing",)
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
    if state.concurrency is not None and state.concurrency < 1 and not state.paused:
        problems.append("a concurrency below 1")
    if state.kind == "other":
        problems.append("not a name pgtasks writes (queue:…, task:… or key:…)")
    if declared is False and state.stored and state.declared and state.kind != "fair":
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


def _allowed(definition: Mapping[str, Any] | None, instance: str, running: int) -> int | None:
    """How many more jobs of ``instance`` may start now: its free slots and, for a rate,
    its whole tokens (None: no limit stored, or it limits neither)."""
    if definition is None:
        return None
    room: list[float] = []
    if definition["concurrency"] is not None:
        room.append(max(0, definition["concurrency"] - running))
    tokens = definition["tokens"]
    if tokens is not None and definition["name"] == instance and math.isfinite(tokens):
        room.append(math.floor(max(0.0, tokens)))
    return int(min(room)) if room else None


def instance_usage(
    definitions: Iterable[Mapping[str, Any]], instances: Iterable[Mapping[str, Any]], top: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows of get_limit_usage and get_limit_top_keys (``top`` keys per limit) from the
    rows of get_limits and get_limit_instances."""
    stored = {row["name"]: row for row in definitions}
    usage: dict[str, dict[str, Any]] = {}
    keyed: dict[str, list[dict[str, Any]]] = {}
    for row in instances:
        instance = row["inst"]
        if instance is None:
            continue
        name, separator, key = instance.partition(SEPARATOR)
        running, pending, due = int(row["running"]), int(row["pending"]), int(row["due"])
        allowed = _allowed(stored.get(name), instance, running)
        held = max(0, due - allowed) if allowed is not None else 0
        total = usage.setdefault(
            name,
            {"name": name, "running": 0, "pending": 0, "due": 0, "held": 0, "keys": 0},
        )
        total["running"] += running
        total["pending"] += pending
        total["due"] += due
        total["held"] += held
        if separator:
            total["keys"] += 1
            keyed.setdefault(name, []).append(
                {"name": name, "key": key, "running": running, "pending": pending}
                | {"due": due, "held": held}
            )
    top_keys = []
    for name in sorted(keyed):
        ranked = sorted(keyed[name], key=lambda k: (-k["running"], -k["pending"], k["key"]))
        top_keys += ranked[:top]
    return [usage[name] for name in sorted(usage)], top_keys


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

    def read(conn: psycopg.Connection[Any]) -> tuple[Any, ...]:
        store = database.queries
        definitions = store.get_limits(conn)
        instances = store.get_limit_instances(conn, cap=LIMITED_SCAN)
        bad_values = store.get_limit_bad_values(conn)
        keyed = keyed_state(store, conn, limit=top_keys)
        flow = read_flow(store, conn, app.tasks.values())
        time = store.get_database_time(conn)
        return time, definitions, instances, bad_values, keyed, flow

    now, definitions, instances, bad_values, keyed, flow = database.run(read)
    usage, keys = instance_usage(definitions, instances, top_keys)
    states = limit_states(definitions, usage, keys)
    views = limit_views(states, app.limit_definitions(), bad_values)
    counts = {"": len(views)}
    for tab in KINDS:
        counts[tab] = sum(view.matches(tab) for view in views)
    chosen = [view for view in views if view.matches(kind) and (name is None or view.name == name)]
    summary = instances[0] if instances else {}
    return LimitsPage(
        now=now,
        limits=chosen[:LIMIT_ROWS],
        total=len(chosen),
        counts=counts,
        top_keys=top_keys,
        pending_read=int(summary.get("pending_read") or 0),
        overlimited=int(summary.get("overlimited") or 0),
        first_overlimited=summary.get("first_overlimited"),
        flow=flow,
        keyed=keyed,
    )
