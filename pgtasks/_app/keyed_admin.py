"""Fair keys and sequences as operators read and release them (``pgtasks limits``,
``pgtasks sequences release``, the dashboard's limits page, ``pgtasks stats``,
``pgtasks doctor``); see docs/howto/flow-control.md."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg

from .._payload import MAX_KEY_BYTES, check_name

if TYPE_CHECKING:
    from .._store.ports import AdminPort, OperatorsPort
    from .app import App


@dataclasses.dataclass(frozen=True)
class FairKey:
    """A fair key with pending or running jobs; ``waited``: seconds its oldest due job
    has waited (None: none is due)."""

    key: str
    pending: int
    running: int
    waited: float | None
    #: The store it was read from, when read from several (``flow_state`` of a root App).
    store: str | None = None


@dataclasses.dataclass(frozen=True)
class SequenceState:
    """A sequence with unfinished jobs or a hold: its head (the pending or running job),
    how many jobs wait behind it, and the failed job holding it (None: not held)."""

    key: str
    waiting: int
    head_id: int | None
    head_status: str | None
    task_name: str | None
    held_by: int | None
    held_at: datetime | None
    #: The store it was read from, when read from several (``flow_state`` of a root App).
    store: str | None = None

    @property
    def length(self) -> int:
        return self.waiting + (1 if self.head_id is not None else 0)


@dataclasses.dataclass(frozen=True)
class KeyedState:
    """The busiest and the starved fair keys, and the sequences (held ones first)."""

    busiest: list[FairKey]
    starved: list[FairKey]
    sequences: list[SequenceState]

    @property
    def held(self) -> list[SequenceState]:
        return [sequence for sequence in self.sequences if sequence.held_by is not None]

    def as_dict(self) -> dict[str, Any]:
        def fair(rows: list[FairKey]) -> list[dict[str, Any]]:
            return [_without_store(dataclasses.asdict(row)) for row in rows]

        return {
            "fair_keys": {"busiest": fair(self.busiest), "starved": fair(self.starved)},
            "sequences": [
                {
                    **_without_store(dataclasses.asdict(sequence)),
                    "length": sequence.length,
                    "held_at": None if sequence.held_at is None else sequence.held_at.isoformat(),
                }
                for sequence in self.sequences
            ],
        }


def _without_store(row: dict[str, Any]) -> dict[str, Any]:
    """A row as JSON shows it: its store only when it was read from several."""
    if row.get("store") is None:
        row.pop("store", None)
    return row


def read_keyed(app: App, conn: psycopg.Connection[Any], *, limit: int = 10) -> KeyedState:
    """The fair keys (``limit`` busiest and starved) and up to five times ``limit`` sequences,
    on ``conn``. These reads count the unfinished jobs that have such keys."""
    return keyed_state(app.queries, conn, limit=limit)


def keyed_state(
    store: OperatorsPort, conn: psycopg.Connection[Any], *, limit: int = 10
) -> KeyedState:
    """:func:`read_keyed` with the queries of ``store`` (the dashboard's own)."""
    busiest: list[FairKey] = []
    starved: list[FairKey] = []
    for row in store.get_fair_keys(conn, limit=limit):
        key = FairKey(row["key"], int(row["pending"]), int(row["running"]), row["waited"])
        (busiest if row["kind"] == "busiest" else starved).append(key)
    sequences = [
        SequenceState(
            key=row["key"],
            waiting=int(row["waiting"]),
            head_id=row["head_id"],
            head_status=row["head_status"],
            task_name=row["task_name"],
            held_by=row["held_by"],
            held_at=row["held_at"],
        )
        for row in store.get_sequences(conn, limit=5 * limit)
    ]
    return KeyedState(busiest, starved, sequences)


def _owners(app: App, store: str | None, queue: str | None) -> list[App]:
    """The Apps of the stores an operation covers: ``store``'s, the store ``queue`` routes
    to, else every store the App serves (the root App of several: each of them)."""

    if store is not None and queue is not None:
        raise ValueError("store= and queue= name the same thing: give one of them")
    if store is not None:
        return [app.routing.for_store(store)]
    if queue is not None:
        return [app.routing.for_queue(check_name("queue", queue))]
    return app.routing.serving()


def flow_state(
    app: App, *, limit: int = 10, store: str | None = None, queue: str | None = None
) -> KeyedState:
    """:func:`read_keyed` on the app's connections (the replica when there is one): of
    store ``store``, of the store ``queue`` routes to, else of every store the App serves
    (the root App of several stores: each store's, merged, each row naming its store)."""
    owners = _owners(app, store, queue)
    if len(owners) == 1:
        return _read_one(owners[0], limit)
    states = {owner.store_name: _read_one(owner, limit) for owner in owners}
    return _merged(states, limit)


def _read_one(owner: App, limit: int) -> KeyedState:
    return owner.database.read(lambda conn: read_keyed(owner, conn, limit=limit))


def _merged(states: dict[str, KeyedState], limit: int) -> KeyedState:
    """The states of several stores as one, in each list's order, each row tagged."""
    busiest = [
        dataclasses.replace(key, store=name)
        for name, state in states.items()
        for key in state.busiest
    ]
    starved = [
        dataclasses.replace(key, store=name)
        for name, state in states.items()
        for key in state.starved
    ]
    sequences = [
        dataclasses.replace(sequence, store=name)
        for name, state in states.items()
        for sequence in state.sequences
    ]
    busiest.sort(key=lambda key: (-key.pending, key.key))
    starved.sort(key=lambda key: (-(key.waited or 0.0), key.key))
    sequences.sort(key=lambda sequence: (sequence.held_by is None, -sequence.waiting, sequence.key))
    return KeyedState(busiest[:limit], starved[:limit], sequences[: 5 * limit])


def release_sequence(
    app: App, key: str, *, store: str | None = None, queue: str | None = None
) -> int | None:
    """Release sequence ``key`` from the failed job holding it: its next waiting job
    starts. Returns that job's id (None: nothing waits, or a job of it is pending or
    running). The failed job stays failed (retry it to run it again, in its turn).

    Of store ``store``, of the store ``queue`` routes to, else of every store the App
    serves (a root App of several stores releases the key in each; the id returned is
    the first job started, in the App's order of stores)."""
    started = release_sequence_each(app, key, store=store, queue=queue)
    return next((job_id for job_id in started.values() if job_id is not None), None)


def release_sequence_each(
    app: App, key: str, *, store: str | None = None, queue: str | None = None
) -> dict[str, int | None]:
    """:func:`release_sequence` store by store: the job each store started, by store name."""
    name = check_name("sequence key", key, MAX_KEY_BYTES)
    started: dict[str, int | None] = {}
    for owner in _owners(app, store, queue):
        queries: AdminPort = owner.queries

        def release(conn: psycopg.Connection[Any], queries: AdminPort = queries) -> int | None:
            with conn.transaction():
                queries.release_sequence_hold(conn, name)
            return queries.advance_sequence(conn, name)

        started[owner.store_name] = owner.database.run(release)
    return started


@dataclasses.dataclass(frozen=True)
class LimitsView:
    """What ``pgtasks limits`` and the dashboard's limits page show: the limits, the fair
    keys and the sequences."""

    limits: list[Any]
    keyed: KeyedState


def limits_view(app: App, *, top_keys: int = 10) -> LimitsView:
    """The limits (``app.admin.read_limits``) and the fair keys and sequences, in one
    read."""
    from .admin import limits_unreadable

    def read(conn: psycopg.Connection[Any]) -> LimitsView:
        return LimitsView(
            app.admin.read_limits(conn, top_keys=top_keys),
            read_keyed(app, conn, limit=top_keys),
        )

    try:
        return app.database.read(read)
    except psycopg.Error as error:
        raise limits_unreadable(error) from None


def format_keyed(state: KeyedState) -> str:
    """The fair keys and sequences as ``pgtasks limits`` prints them (empty: none)."""
    from .._operations import format_table

    parts = []
    fair = [("busiest", key) for key in state.busiest] + [("starved", key) for key in state.starved]
    if fair:
        parts.append(
            format_table(
                ("FAIR KEY", "LIST", "PENDING", "RUNNING", "OLDEST DUE WAITED"),
                [
                    [key.key, kind, key.pending, key.running, _seconds(key.waited)]
                    for kind, key in fair
                ],
            )
        )
    if state.sequences:
        parts.append(
            format_table(
                ("SEQUENCE", "LENGTH", "HEAD", "HEAD STATUS", "HELD BY FAILED JOB"),
                [
                    [
                        sequence.key,
                        sequence.length,
                        sequence.head_id if sequence.head_id is not None else "-",
                        sequence.head_status or "-",
                        sequence.held_by if sequence.held_by is not None else "-",
                    ]
                    for sequence in state.sequences
                ],
            )
        )
    if state.held:
        parts.append(
            "a sequence held by a failed job runs nothing until that job is retried and done"
            " (`pgtasks jobs retry ID`) or the sequence is released"
            " (`pgtasks sequences release KEY`)"
        )
    return "\n\n".join(parts)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"
