"""Job actions from Python and the command line: run pending jobs now, snooze them, edit
the arguments of a pending job (``App.run_jobs_now``, ``App.snooze_jobs``,
``App.edit_job_arguments``; ``job.run_now()``, ``job.snooze(by)``, ``job.edit(...)``;
``pgtasks jobs run-now|snooze|edit``).

They are the dashboard's job actions (``pending_jobs.py``): the same statements, so each is
race-safe against a claim in progress (the rows are locked and their status read again
after the claim commits: a job that started meanwhile is left alone) and audited (who:
``actor``, by default ``api:<OS user>@<host>``). The ids of an app of several stores are
acted on in the store that issued each. A database that takes no writes (a hot standby,
``default_transaction_read_only``) is refused with a DatabaseError that says so, and an
unmigrated schema with SchemaNotMigratedError, before anything is changed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

import psycopg

from .._errors import DatabaseError, JobNotFoundError
from .._job_filter import JobFilter
from .._jobs import CancelResult, JobRow
from .._payload import encode_meta
from . import pending_jobs
from .actors import actor_here
from .handle import JobHandle

if TYPE_CHECKING:
    from .app import App

#: Jobs whose reason for being left is read back (the others are counted).
EXPLAINED = 20


@dataclasses.dataclass(frozen=True)
class JobsChanged:
    """What a job action did: the jobs it changed (``done``), and those it left with why
    (``left``: id → ``"does not exist"``, ``"is running"``, ``"is due already"``…; the
    first EXPLAINED of them, the others as ``"not changed"``)."""

    action: str
    done: tuple[int, ...]
    left: Mapping[int, str]


@contextlib.contextmanager
def writable(what: str) -> Iterator[None]:
    """A write refused by a read-only database becomes one clear DatabaseError."""
    try:
        yield
    except psycopg.errors.ReadOnlySqlTransaction as error:
        raise DatabaseError(
            f"{what}: the database is read-only ({error.diag.message_primary or error}):"
            " job actions write to the jobs table, run them against the primary;"
            " nothing was changed"
        ) from None


def seconds_of(by: timedelta | float) -> float:
    """A snooze as seconds: a timedelta or a number of seconds (ValueError otherwise)."""
    if isinstance(by, timedelta):
        seconds = by.total_seconds()
    elif isinstance(by, bool) or not isinstance(by, (int, float)):
        raise ValueError(f"snooze by a timedelta or a number of seconds, got {by!r:.80}")
    else:
        seconds = float(by)
    if not 0 < seconds <= pending_jobs.MAX_SNOOZE:  # NaN too
        raise ValueError(
            f"snooze seconds must be above 0 and at most {pending_jobs.MAX_SNOOZE:g},"
            f" got {by!r:.80}"
        )
    return seconds


def _by_store(app: App, ids: Iterable[int]) -> list[tuple[App, list[int]]]:
    found = pending_jobs._job_ids(ids)
    if app.store_router.single:
        return [(app, found)] if found else []
    groups: dict[str, tuple[App, list[int]]] = {}
    for job_id in found:
        owner = app.routing.for_id(job_id)
        groups.setdefault(owner.store_name, (owner, []))[1].append(job_id)
    return list(groups.values())


def _why(owner: App, job_ids: Sequence[int], action: str) -> dict[int, str]:
    """Why each of ``job_ids`` was left (read after the action: the status now)."""
    shown = list(job_ids[:EXPLAINED])

    def read(conn: psycopg.Connection[Any]) -> dict[int, str]:
        reasons = {}
        for job_id in shown:
            status = owner.queries.get_job_status(conn, job_id)
            if status is None:
                reasons[job_id] = "does not exist (it may have been pruned)"
            elif status.value == "pending" and action == "run_now":
                reasons[job_id] = "is due already"
            else:
                reasons[job_id] = f"is {status.value}"
        return reasons

    reasons = owner.database.run(read) if shown else {}
    return {job_id: reasons.get(job_id, "not changed") for job_id in job_ids}


def _each_store(app: App, ids: Iterable[int], action: str, act: Any) -> JobsChanged:
    done: list[int] = []
    left: dict[int, str] = {}
    with writable(action.replace("_", " ")):
        for owner, job_ids in _by_store(app, ids):
            outcome: pending_jobs.JobsAction = act(owner, job_ids)
            done += outcome.done
            left.update(_why(owner, outcome.refused, action))
    return JobsChanged(action, tuple(sorted(done)), left)


def run_jobs_now(app: App, ids: Iterable[int], *, actor: str | None = None) -> JobsChanged:
    """Pending jobs of ``ids`` scheduled later (a countdown, an eta, a retry's delay)
    become due now; no attempt is spent. The others are left, with why."""
    who = actor or actor_here("api")
    return _each_store(
        app, ids, "run_now", lambda owner, job_ids: pending_jobs.run_now(owner, job_ids, actor=who)
    )


def run_matching_now(app: App, job_filter: JobFilter, *, actor: str | None = None) -> int:
    """Every pending job scheduled later that ``job_filter`` selects becomes due now, in
    every store the app serves (committed batches); how many."""
    who = actor or actor_here("api")
    with writable("run now"):
        return sum(
            pending_jobs.run_now_matching(owner, job_filter, actor=who)
            for owner in app.routing.serving()
        )


def snooze_jobs(
    app: App, ids: Iterable[int], by: timedelta | float, *, actor: str | None = None
) -> JobsChanged:
    """Pending jobs of ``ids`` start ``by`` (a timedelta or seconds) later than they would
    (from now when due already); no attempt is spent. The others are left, with why."""
    seconds = seconds_of(by)
    who = actor or actor_here("api")
    return _each_store(
        app,
        ids,
        "snooze",
        lambda owner, job_ids: pending_jobs.snooze(owner, job_ids, seconds, actor=who),
    )


def edit_job_arguments(
    app: App,
    job_id: int,
    *,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    actor: str | None = None,
) -> None:
    """New ``args`` and/or ``kwargs`` of the pending job ``job_id`` (the one not given is
    kept), checked as an enqueue of its task checks them (TypeError naming the task when
    they do not match its signature, PayloadError...). JobNotPendingError when it started
    meanwhile or ended, JobNotFoundError when there is none; nothing is changed then."""
    if args is None and kwargs is None:
        raise ValueError("give the new args, the new kwargs, or both")
    with writable("edit arguments"):
        pending_jobs.edit_arguments(
            app,
            job_id,
            None if args is None else list(args),
            None if kwargs is None else dict(kwargs),
            actor=actor or actor_here("api"),
        )


class JobActions:
    """The App's job actions (a base of App; see the module docstring)."""

    def run_jobs_now(self, ids: Iterable[int], *, actor: str | None = None) -> JobsChanged:
        """Pending jobs of ``ids`` scheduled later become due now (no attempt spent);
        race-safe against a claim, audited. See docs/howto/operations.md."""
        return run_jobs_now(cast("App", self), ids, actor=actor)

    def snooze_jobs(
        self, ids: Iterable[int], by: timedelta | float, *, actor: str | None = None
    ) -> JobsChanged:
        """Pending jobs of ``ids`` start ``by`` (a timedelta or seconds) later (from now
        when due already); no attempt spent; race-safe against a claim, audited."""
        return snooze_jobs(cast("App", self), ids, by, actor=actor)

    def edit_job_arguments(
        self,
        job_id: int,
        *,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        actor: str | None = None,
    ) -> None:
        """New ``args`` and/or ``kwargs`` of a pending job, checked as an enqueue checks
        them; race-safe against a claim (JobNotPendingError when it started first),
        audited."""
        edit_job_arguments(cast("App", self), job_id, args=args, kwargs=kwargs, actor=actor)

    # -- jobs by id (each in the store that issued its id) --
    def get_job(self, job_id: int) -> JobHandle[Any]:
        """A handle for an existing job (in the store its id names); JobNotFoundError
        when there is none."""
        owner = cast("App", self).routing.for_id(job_id)
        if owner.database.run(lambda conn: owner.queries.get_job_status(conn, job_id)) is None:
            raise _missing(job_id)
        return JobHandle(owner, job_id)

    async def aget_job(self, job_id: int) -> JobHandle[Any]:
        owner = cast("App", self).routing.for_id(job_id)
        status = await owner.database.arun(lambda conn: owner.queries.aget_job_status(conn, job_id))
        if status is None:
            raise _missing(job_id)
        return JobHandle(owner, job_id)

    def cancel(self, job_id: int, *, terminate: bool = False) -> CancelResult:
        """Cancel a job: pending → cancelled (never runs); running → flagged, its worker is
        told, and it ends cancelled (async tasks get CancelledError, bound sync tasks see
        ``ctx.cancelled()``); finished → nothing changes (``outcome == "already_finished"``).
        ``terminate=True`` kills a running attempt: see docs/howto/operations.md."""
        owner = cast("App", self).routing.for_id(job_id)
        row = owner.database.run(
            lambda conn: owner.queries.cancel_job(conn, job_id, terminate=terminate)
        )
        if row is None:
            raise _missing(job_id)
        return CancelResult.from_row(job_id, row, terminate=terminate)

    async def acancel(self, job_id: int, *, terminate: bool = False) -> CancelResult:
        owner = cast("App", self).routing.for_id(job_id)
        row = await owner.database.arun(
            lambda conn: owner.queries.acancel_job(conn, job_id, terminate=terminate)
        )
        if row is None:
            raise _missing(job_id)
        return CancelResult.from_row(job_id, row, terminate=terminate)

    def update_job_meta(
        self, job_id: int, *, worker_id: int, attempt: int, patch: Mapping[str, Any]
    ) -> bool:
        """Merge ``patch`` into a running job's meta under its lease (worker_id, attempt):
        one fenced UPDATE. False when the lease is lost (nothing written); an empty patch
        writes nothing. JobContext.update_meta and set_progress write through it."""
        app = cast("App", self)
        patch_json = encode_meta(
            "meta update", patch, max_bytes=app.max_payload_bytes, internal=True
        )
        if patch_json is None:
            return True
        owner = app.routing.for_id(job_id)
        return owner.database.run(
            lambda conn: owner.queries.update_job_meta(
                conn, job_id=job_id, worker_id=worker_id, attempt=attempt, patch_json=patch_json
            )
        )

    def get_jobs(self, job_ids: Sequence[int]) -> list[JobRow]:
        """Snapshots of the jobs with these ids, in id order (missing ids are skipped)."""
        app, rows = cast("App", self), list[JobRow]()
        for name, ids in app.store_router.group_ids(list(job_ids)).items():
            owner = app.routing.for_store(name)
            rows.extend(owner.database.run(functools.partial(owner.queries.get_jobs, job_ids=ids)))
        return sorted(rows, key=lambda row: row.id) if len(rows) > 1 else rows

    async def aget_jobs(self, job_ids: Sequence[int]) -> list[JobRow]:
        app, rows = cast("App", self), list[JobRow]()
        for name, ids in app.store_router.group_ids(list(job_ids)).items():
            owner = app.routing.for_store(name)
            rows.extend(
                await owner.database.arun(functools.partial(owner.queries.aget_jobs, job_ids=ids))
            )
        return sorted(rows, key=lambda row: row.id) if len(rows) > 1 else rows


def _missing(job_id: int) -> JobNotFoundError:
    return JobNotFoundError(f"job {job_id} does not exist (it may have been pruned)")
