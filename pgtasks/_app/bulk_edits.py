"""New arguments for many pending jobs of one task at once (the jobs list's bulk edit):
one arguments document, checked once as an enqueue of that task checks it, written to
every ticked job that is still pending; a job claimed meanwhile is refused and counted.
The single-job edit is pending_jobs.edit_arguments."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from .actors import actor_here
from .pending_jobs import JobsAction, _encoded, _job_ids, _limit_instances

if TYPE_CHECKING:
    from .._store.ports import AdminPort
    from .app import App


def edit_arguments_many(
    app: App,
    ids: Iterable[int],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    actor: str | None = None,
) -> JobsAction:
    """``args`` and ``kwargs`` become the arguments of every pending job of ``ids``, all
    of one task (ValueError naming them otherwise; nothing changed). The arguments are
    checked once as an enqueue of that task checks them (PayloadError, TypeError...:
    nothing changed). The rows are locked in id order in one transaction: a job a worker
    claimed first (running, or finished, or gone) is ``refused``, never edited; a claim
    that comes after the lock waits for it and runs the new arguments. Each edit is
    audited (``edit_arguments``, before and after)."""
    found = _job_ids(ids)
    who = actor or actor_here("api")
    queries: AdminPort = app.queries

    def operation(conn: psycopg.Connection[Any]) -> JobsAction:
        with conn.transaction():
            rows = [queries.lock_pending_job(conn, job_id) for job_id in found]
            pending = [row for row in rows if row is not None and row["status"] == "pending"]
            tasks = sorted({row["task_name"] for row in pending})
            if len(tasks) > 1:
                raise ValueError(
                    f"the selected pending jobs are of {len(tasks)} tasks ({', '.join(tasks)}):"
                    " edit the arguments of one task's jobs at a time; nothing was changed"
                )
            if not pending:
                return JobsAction("edit_arguments", (), tuple(found))
            args_json, kwargs_json = _encoded(app, tasks[0], args, kwargs)
            after = {"args": json.loads(args_json), "kwargs": json.loads(kwargs_json)}
            for row in pending:
                groups, key = _limit_instances(app, row, args, kwargs)
                queries.edit_job_arguments(
                    conn,
                    row["id"],
                    args_json=args_json,
                    kwargs_json=kwargs_json,
                    limit_groups=groups,
                    limit_key=key,
                )
                queries.insert_audit(
                    conn,
                    actor=who,
                    action="edit_arguments",
                    target=f"job:{row['id']}",
                    before={"args": row["args"], "kwargs": row["kwargs"]},
                    after=after,
                )
        done = tuple(int(row["id"]) for row in pending)
        return JobsAction("edit_arguments", done, tuple(i for i in found if i not in set(done)))

    return app.database.run(operation)
