"""Actions on pending jobs (docs/howto/operations.md): run now, snooze, edit the
arguments; each audited (who, what, when, the values before and after).

The job actions lock the rows they change and re-read their status after any claim in
progress: a job a worker claims at that moment is either changed before the claim or
left alone (counted as refused, ``JobNotPendingError`` for one job).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import psycopg

from .._errors import JobNotFoundError, JobNotPendingError
from .._job_filter import JobFilter
from .._payload import encode_arguments
from .actors import actor_here
from .limits import TaskLimits
from .routing import RoutedApp


class EditedTask(Protocol):
    """What an edit of a job's arguments reads of its task."""

    @property
    def limits(self) -> TaskLimits | None: ...

    def _arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[str, str]: ...


class JobsApp(RoutedApp, Protocol):
    """What the actions on pending jobs read of an App."""

    @property
    def tasks(self) -> Mapping[str, EditedTask]: ...

    @property
    def max_payload_bytes(self) -> int: ...


#: Longest snooze (seconds): ten years.
MAX_SNOOZE = 10 * 365 * 86400.0
MAX_JOBS = 10_000  # jobs one call of run_now or snooze acts on


@dataclasses.dataclass(frozen=True)
class JobsAction:
    """What a job action did: the jobs changed, and those it left (not pending, or
    already due for run-now)."""

    action: str
    done: tuple[int, ...]
    refused: tuple[int, ...]


def _job_ids(ids: Iterable[int]) -> list[int]:
    found = sorted({int(job_id) for job_id in ids})
    if len(found) > MAX_JOBS:
        raise ValueError(f"at most {MAX_JOBS} jobs at once, got {len(found)}")
    return found


def _act(app: JobsApp, action: str, ids: list[int], actor: str, change: Any) -> JobsAction:
    def operation(conn: psycopg.Connection[Any]) -> JobsAction:
        with conn.transaction():
            rows = change(conn, ids)
            for row in rows:
                app.queries.insert_audit(
                    conn,
                    actor=actor,
                    action=action,
                    target=f"job:{row['id']}",
                    before={"run_at": row["before"]},
                    after={"run_at": row["after"]},
                )
        done = tuple(sorted(int(row["id"]) for row in rows))
        return JobsAction(action, done, tuple(i for i in ids if i not in set(done)))

    return app.database.run(operation)


def run_now(app: JobsApp, ids: Iterable[int], *, actor: str | None = None) -> JobsAction:
    """Pending jobs of ``ids`` scheduled later (a countdown, an eta, a retry's delay)
    become due now; no attempt is spent. The others are left (``refused``)."""
    found = _job_ids(ids)
    return _act(app, "run_now", found, actor or actor_here("api"), app.queries.run_jobs_now)


def run_now_matching(app: JobsApp, job_filter: JobFilter, *, actor: str | None = None) -> int:
    """Every pending job scheduled later that ``job_filter`` matches becomes due now, in
    committed batches of MAX_JOBS (as :func:`run_now`); how many."""
    count, ids = 0, [0]
    while True:
        ids = app.database.run(
            functools.partial(
                app.queries.get_filtered_scheduled_ids,
                job_filter=job_filter,
                after=ids[-1],
                limit=MAX_JOBS,
            )
        )
        if not ids:
            return count
        count += len(run_now(app, ids, actor=actor).done)


def snooze(
    app: JobsApp, ids: Iterable[int], seconds: float, *, actor: str | None = None
) -> JobsAction:
    """Pending jobs of ``ids`` start ``seconds`` later than they would (from now when
    due); no attempt is spent."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ValueError(f"snooze seconds must be a number, got {seconds!r}")
    if not 0 < seconds <= MAX_SNOOZE:
        raise ValueError(
            f"snooze seconds must be above 0 and at most {MAX_SNOOZE:g}, got {seconds!r}"
        )
    found = _job_ids(ids)
    return _act(
        app,
        "snooze",
        found,
        actor or actor_here("api"),
        lambda conn, job_ids: app.queries.snooze_jobs(conn, job_ids, float(seconds)),
    )


def edit_arguments(
    app: JobsApp,
    job_id: int,
    args: Sequence[Any] | None,
    kwargs: dict[str, Any] | None,
    *,
    actor: str | None = None,
) -> None:
    """New arguments for the pending job ``job_id`` (None: its own kept), checked as an
    enqueue checks them (the task's signature when this app knows it, JSON, size, depth).
    JobNotPendingError when it started meanwhile (nothing changed), JobNotFoundError."""
    app = app.routing.for_id(job_id)
    queries = app.queries

    def operation(conn: psycopg.Connection[Any]) -> None:
        with conn.transaction():
            row = queries.lock_pending_job(conn, job_id)
            found = queries.get_job_status(conn, job_id) if row is None else None
            status = row["status"] if row is not None else (found.value if found else None)
            if status is None:
                raise JobNotFoundError(f"job {job_id} does not exist (it may have been pruned)")
            if row is None or status != "pending":
                raise JobNotPendingError(
                    f"job {job_id} is {status} (already started): only a pending job's"
                    " arguments can be edited; nothing was changed"
                )
            new_args = row["args"] if args is None else args
            new_kwargs = row["kwargs"] if kwargs is None else kwargs
            args_json, kwargs_json = _encoded(app, row["task_name"], new_args, new_kwargs)
            groups, key = _limit_instances(app, row, new_args, new_kwargs)
            queries.edit_job_arguments(
                conn,
                job_id,
                args_json=args_json,
                kwargs_json=kwargs_json,
                limit_groups=groups,
                limit_key=key,
            )
            queries.insert_audit(
                conn,
                actor=actor or actor_here("api"),
                action="edit_arguments",
                target=f"job:{job_id}",
                before={"args": row["args"], "kwargs": row["kwargs"]},
                after={"args": json.loads(args_json), "kwargs": json.loads(kwargs_json)},
            )

    app.database.run(operation)


def _encoded(
    app: JobsApp, task_name: str, args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[str, str]:
    if not isinstance(args, (list, tuple)):
        raise TypeError(f"args must be a JSON array, got {type(args).__name__}")
    if not isinstance(kwargs, dict):
        raise TypeError(f"kwargs must be a JSON object, got {type(kwargs).__name__}")
    task = app.tasks.get(task_name)
    if task is not None:
        return task._arguments(args, kwargs)  # the enqueue's own checks
    return encode_arguments(task_name, args, kwargs, max_bytes=app.max_payload_bytes)


def _limit_instances(
    app: JobsApp, row: dict[str, Any], args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[list[str] | None, str | None]:
    """The job's limit instances with its concurrency key computed from the new
    arguments (the other instances kept as they are)."""
    groups = list(row["limit_groups"] or [])
    task = app.tasks.get(row["task_name"])
    limits = task.limits if task is not None else None
    if limits is None or limits.concurrency_key is None:
        return (groups or None), row["limit_key"]
    key = limits.key_of(args, kwargs)
    prefix = f"key:{row['task_name']}"
    kept = [name for name in groups if not name.startswith(prefix + "\x1f")]
    fresh = [name for name in limits.instances(key) if name.startswith(prefix)]
    merged = sorted(set(kept) | set(fresh))
    return (merged or None), key
