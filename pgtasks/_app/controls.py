"""Operators' runtime controls (docs/howto/operations.md): limits changed, paused,
resumed and reset without a deploy; worker pools resized (the actions on pending jobs,
run now, snooze, edit the arguments, are pending_jobs.py's); every one audited (who,
what, when, the values before and after).

A changed limit is stored in the database, marked overridden: every worker of every host
reads it at its next limited claim (a notification on the limits channel wakes them at
once, the poll interval is the fallback), and a worker starting later records what its app
declares without undoing the change; a reset makes the declared values apply again. A
limit set on a task or queue the app does not declare makes their jobs carry it (the
pending and running ones at once, new ones through a trigger enabled while such a limit
exists).
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import psycopg

from .._errors import LimitChangeError, PoolChangeError
from .._limits import (
    RateLimit,
    check_concurrency,
    check_limit_target,
    describe_rate,
    limit_kind,
    parse_rate_limit,
)
from .._payload import MAX_NAME_BYTES, check_name
from .actors import actor_here
from .routing import RoutedApp, RoutedTask


class ControlledApp(RoutedApp, Protocol):
    """What the runtime controls read of an App."""

    @property
    def tasks(self) -> Mapping[str, RoutedTask]: ...

    @property
    def heartbeat_interval(self) -> float: ...


#: Seconds an operator's change waits for the jobs table's lock (enabling the trigger).
LOCK_TIMEOUT = 5.0


UNSET: Any = type("Unset", (), {"__repr__": lambda self: "UNSET"})()  # a value left as it is


@dataclasses.dataclass(frozen=True)
class LimitChange:
    """One change of a limit: its values before and after (None: not stored), and how
    many jobs were made to count in it or no longer count in it."""

    name: str
    action: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    jobs: int = 0

    def describe(self) -> str:
        jobs = f"; {self.jobs} job(s) re-marked" if self.jobs else ""
        before, after = describe_values(self.before), describe_values(self.after)
        return f"{self.name}: {before} -> {after}{jobs}"


def describe_values(values: dict[str, Any] | None) -> str:
    """``concurrency=3 rate=10/s paused`` of a limit's values (an audit row's)."""
    if not isinstance(values, dict):
        return "none"
    concurrency = values.get("concurrency")
    parts = [
        f"concurrency={concurrency if concurrency is not None else '-'}",
        f"rate={values.get('rate') or '-'}",
    ]
    if values.get("paused"):
        parts.append("paused")
    if values.get("declared") is False:
        parts.append("(not declared)")
    return " ".join(parts)


def check_limit_name(name: object, *, existing: bool) -> str:
    """A limit name an operator may change: ``queue:<queue>`` or ``task:<task>`` (any,
    stored or not), ``key:<task>`` (a per-key limit the app declares: stored)."""
    try:
        text = check_name("limit name", name, MAX_NAME_BYTES + 6)
        check_limit_target("a limit name", text)
    except ValueError as error:
        raise LimitChangeError(str(error)) from None
    kind, _ = limit_kind(text)
    if kind == "other":
        raise LimitChangeError(
            f"limit name {text!r} must be queue:<queue>, task:<task> or key:<task>"
            " (`pgtasks limits` lists the stored ones)"
        )
    if kind == "key" and not existing:
        raise LimitChangeError(
            f"{text!r}: a per-key limit is declared on the task (concurrency_key=); no"
            " worker stored it yet, so it cannot be changed here"
        )
    return text


def values_of(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """What applies to a stored limit, as the audit and the pages show it."""
    if row is None:
        return None
    return {
        "concurrency": row["paused_concurrency"] if row["paused"] else row["concurrency"],
        "rate": describe_rate(row["rate_count"], row["rate_period"])
        if row["rate_count"] is not None
        else None,
        "paused": bool(row["paused"]),
        "declared": bool(row["declared"]),
    }


def _rate_columns(rate: RateLimit | None) -> dict[str, Any]:
    if rate is None:
        return {"rate_count": None, "rate_period": None, "burst": 1.0}
    return {"rate_count": rate.count, "rate_period": rate.period, "burst": rate.burst}


def _current_rate(row: dict[str, Any] | None) -> RateLimit | None:
    if row is None or row["rate_count"] is None or row["rate_period"] is None:
        return None
    text = describe_rate(row["rate_count"], row["rate_period"])
    return RateLimit(int(row["rate_count"]), float(row["rate_period"]), text)


def parse_concurrency(value: object) -> int | None:
    """A concurrency an operator typed: a number >= 1, or ``none``/``-`` for no limit."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "-")):
        return None
    if isinstance(value, str):
        text = value.strip()
        if not (text.isascii() and text.isdigit() and len(text) <= 10):
            raise LimitChangeError(
                f"concurrency must be a number >= 1 or 'none', got {value[:40]!r}"
            )
        value = int(text)
    try:
        return check_concurrency("concurrency", value)
    except ValueError as error:
        raise LimitChangeError(str(error)) from None


def parse_rate(value: object) -> RateLimit | None:
    """A rate an operator typed: ``10/s``, ``100/m``, ``5`` (per second), or ``none``."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "-")):
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = f"{value}/s"
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = f"{value.strip()}/s"
    try:
        return parse_rate_limit("rate", value)
    except ValueError as error:
        raise LimitChangeError(str(error)) from None


def store_of_limit(app: ControlledApp, name: str) -> ControlledApp:
    """The App of the store that holds the limit ``name``: its queue's (a task's: the
    task's queue's, when this app knows the task)."""
    kind, target = limit_kind(name)
    task = app.tasks.get(target) if kind in ("task", "key") else None
    queue = target if kind == "queue" else task.queue if task is not None else None
    owner: ControlledApp = app if queue is None else app.routing.for_queue(queue)
    return owner


def _change(
    app: ControlledApp,
    name: str,
    action: str,
    actor: str,
    decide: Any,
) -> LimitChange:
    """Lock the limit's row, ``decide(row)`` the values to write (None: remove or reset),
    write them, re-mark the jobs, audit, notify; one transaction."""
    app = store_of_limit(app, name)
    queries = app.queries

    def operation(conn: psycopg.Connection[Any]) -> LimitChange:
        with conn.transaction():
            row = queries.lock_limit(conn, name)
            # Counting the stored limits and reading the trigger below see every earlier
            # such change committed: the trigger stays on while a runtime limit is stored.
            queries.lock_runtime_limits(conn)
            before = values_of(row)
            values = decide(row)
            jobs = 0
            if values is None:  # reset
                if row is None:
                    raise LimitChangeError(f"no limit {name!r} is stored: nothing to reset")
                if row["declared"]:
                    queries.reset_declared_limit(conn, name)
                else:
                    queries.delete_runtime_limit(conn, name)
                    jobs = queries.unstamp_limit_jobs(conn, name)
                    if queries.count_runtime_limits(conn) == 0:
                        queries.set_step_lock_timeout(conn, LOCK_TIMEOUT)
                        queries.disable_runtime_limits_trigger(conn)
            else:
                written = queries.write_limit(conn, name, values, actor)
                if not written["declared"]:
                    jobs = _stamp(app, conn, name)
            after = values_of(queries.lock_limit(conn, name))
            queries.insert_audit(
                conn, actor=actor, action=action, target=f"limit:{name}", before=before, after=after
            )
            queries.notify_limits_changed(conn, name)
        return LimitChange(name, action, before, after, jobs)

    return app.database.run(operation)


def _stamp(app: ControlledApp, conn: psycopg.Connection[Any], name: str) -> int:
    """New, pending and running jobs of the limit's task or queue count in it."""
    queries = app.queries
    if not queries.get_runtime_limits_trigger(conn):
        queries.set_step_lock_timeout(conn, LOCK_TIMEOUT)
        try:
            queries.enable_runtime_limits_trigger(conn)
        except psycopg.errors.LockNotAvailable:
            raise LimitChangeError(
                f"{name}: the jobs table stayed locked for {LOCK_TIMEOUT:g} s (a long"
                " transaction holds it); nothing was changed: try again"
            ) from None
        except psycopg.errors.InsufficientPrivilege as error:
            raise LimitChangeError(
                f"{name}: a limit the app does not declare needs the jobs table's owner"
                f" role once (to enable its trigger): {error}; nothing was changed"
            ) from None
    kind, target = limit_kind(name)
    return queries.stamp_limit_jobs(
        conn,
        name,
        task=target if kind == "task" else None,
        queue=target if kind == "queue" else None,
    )


def set_limit(
    app: ControlledApp,
    name: str,
    *,
    concurrency: int | str | None = UNSET,
    rate: RateLimit | str | int | None = UNSET,
    actor: str | None = None,
) -> LimitChange:
    """Change what applies to the limit ``name`` (``queue:<queue>``, ``task:<task>`` or a
    stored ``key:<task>``): ``concurrency`` (None: none) and/or ``rate`` (``"10/s"``;
    None: none); what is not given stays. Works on any task or queue, declared or not."""
    if concurrency is UNSET and rate is UNSET:
        raise LimitChangeError("give a concurrency or a rate (or both) to set")
    new_concurrency = UNSET if concurrency is UNSET else parse_concurrency(concurrency)
    new_rate = rate if rate is UNSET or isinstance(rate, RateLimit) else parse_rate(rate)

    def decide(row: dict[str, Any] | None) -> dict[str, Any]:
        check_limit_name(name, existing=row is not None)
        current = values_of(row)
        paused = bool(current and current["paused"])
        applied = current["concurrency"] if current else None
        chosen = applied if new_concurrency is UNSET else new_concurrency
        chosen_rate = _current_rate(row) if new_rate is UNSET else new_rate
        if chosen is None and chosen_rate is None and not paused:
            raise LimitChangeError(
                f"{name}: no concurrency and no rate would be left; `pgtasks limits reset"
                f" {name}` returns to what the app declares"
            )
        return {
            "concurrency": 0 if paused else chosen,
            **_rate_columns(chosen_rate),
            "paused": paused,
            "paused_concurrency": chosen if paused else None,
        }

    return _change(app, name, "set", actor or actor_here("api"), decide)


def pause_limit(app: ControlledApp, name: str, *, actor: str | None = None) -> LimitChange:
    """No job under the limit starts (concurrency 0) until :func:`resume_limit`; running
    ones finish. Any task or queue, declared or not."""

    def decide(row: dict[str, Any] | None) -> dict[str, Any]:
        check_limit_name(name, existing=row is not None)
        if row is not None and row["paused"]:
            raise LimitChangeError(f"{name} is paused already")
        current = values_of(row)
        return {
            "concurrency": 0,
            **_rate_columns(_current_rate(row)),
            "paused": True,
            "paused_concurrency": current["concurrency"] if current else None,
        }

    return _change(app, name, "pause", actor or actor_here("api"), decide)


def resume_limit(app: ControlledApp, name: str, *, actor: str | None = None) -> LimitChange:
    """Undo :func:`pause_limit`: the concurrency before the pause applies again (a limit
    paused that had nothing else is removed, as a reset would)."""

    def decide(row: dict[str, Any] | None) -> dict[str, Any] | None:
        if row is None or not row["paused"]:
            raise LimitChangeError(f"{name} is not paused")
        rate = _current_rate(row)
        if row["paused_concurrency"] is None and rate is None and not row["declared"]:
            return None
        return {
            "concurrency": row["paused_concurrency"],
            **_rate_columns(rate),
            "paused": False,
            "paused_concurrency": None,
        }

    return _change(app, name, "resume", actor or actor_here("api"), decide)


def reset_limit(app: ControlledApp, name: str, *, actor: str | None = None) -> LimitChange:
    """What the app declares applies again (a limit it does not declare is removed, and
    its pending jobs no longer count in it)."""
    return _change(app, name, "reset", actor or actor_here("api"), lambda row: None)


def read_audit(
    app: ControlledApp,
    *,
    targets: Sequence[str] | None = None,
    prefix: str | None = None,
    limit: int = 50,
) -> list[dict[str, Any]]:
    """The last ``limit`` audit rows (newest first), of ``targets`` or a ``prefix``
    (``limit:``, ``job:``) when given."""
    return app.database.run(
        lambda conn: app.queries.get_audit(conn, targets=targets, prefix=prefix, limit=limit)
    )


# -- worker pools ---------------------------------------------------------------------------
_WORKER_NAME = re.compile(r"^(?:pgtasks@[^\s]*:)?(\d{1,18})$")


def parse_worker(text: str) -> int:
    """A worker named by its id (``12``) or as ``pgtasks inspect`` names it
    (``pgtasks@host:pid:12``)."""
    match = _WORKER_NAME.match(text.strip())
    if match is None:
        raise PoolChangeError(
            f"a worker is named by its id (`pgtasks workers` lists them) or as"
            f" pgtasks@host:pid:id, got {text[:100]!r}"
        )
    return int(match[1])


@dataclasses.dataclass(frozen=True)
class PoolChange:
    """A resize of a worker's pool: its slots before and after, and whether the worker
    applied it within the wait (else it applies it at its next heartbeat)."""

    worker_id: int
    before: int
    after: int
    applied: bool

    def describe(self) -> str:
        state = "applied" if self.applied else "asked: the worker applies it at its next heartbeat"
        return f"worker {self.worker_id}: pool {self.before} -> {self.after} ({state})"


def resize_pool(
    app: ControlledApp,
    worker_id: int,
    delta: int,
    *,
    actor: str | None = None,
    wait: float | None = None,
) -> PoolChange:
    """Grow (``delta`` > 0) or shrink the pool of thread and event-loop slots of the live
    worker ``worker_id`` by ``delta``, within the bounds it started with
    (``--min-concurrency``, ``--max-concurrency``); PoolChangeError otherwise. Waits up
    to ``wait`` seconds (default two heartbeats) for the worker to apply it."""
    if isinstance(delta, bool) or not isinstance(delta, int) or delta == 0:
        raise PoolChangeError(f"grow or shrink the pool by a whole number of slots, got {delta!r}")
    queries = app.queries
    action = "pool_grow" if delta > 0 else "pool_shrink"

    def request(conn: psycopg.Connection[Any]) -> tuple[int, int]:
        with conn.transaction():
            row = queries.lock_worker_pool(conn, worker_id)
            if row is None:
                raise PoolChangeError(
                    f"no live worker {worker_id} (`pgtasks workers` lists them); nothing changed"
                )
            low, high = row["concurrency_min"], row["concurrency_max"]
            if low is None or high is None:
                raise PoolChangeError(
                    f"worker {worker_id} takes no pool resize (its jobs run in the process"
                    " pool, or it runs a release before migration 0022); nothing changed"
                )
            current = int(row["concurrency_wanted"] or row["concurrency"])
            size = current + delta
            if not low <= size <= high:
                raise PoolChangeError(
                    f"worker {worker_id} runs {current} job slots: {size} is beyond the"
                    f" bounds it started with, {low} to {high} (`pgtasks worker"
                    " --min-concurrency/--max-concurrency`); nothing changed"
                )
            queries.want_worker_pool(conn, worker_id, size)
            queries.insert_audit(
                conn,
                actor=actor or actor_here("api"),
                action=action,
                target=f"worker:{worker_id}",
                before={"concurrency": current},
                after={"concurrency": size},
            )
        return current, size

    before, after = app.database.run(request)
    deadline = time.monotonic() + (2 * app.heartbeat_interval + 1 if wait is None else wait)
    applied = False
    while True:
        row = app.database.run(lambda conn: queries.lock_worker_pool(conn, worker_id))
        applied = (
            row is not None and row["concurrency"] == after and row["concurrency_wanted"] is None
        )
        if applied or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    return PoolChange(worker_id, before, after, applied)
