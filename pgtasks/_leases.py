"""The values of a worker's round trip with its store, each a record with named fields.

A worker claims jobs with a :class:`ClaimRequest` and gets :class:`ClaimedJob`\\s, each
held under a lease (``worker_id``, ``attempt``); it writes each attempt's end back as a
:class:`Finish`, fenced by that lease. One round trip writes finishes and claims at once
(:class:`RoundTrip`). The Store turns these records into its statements' parameters
(``pgtasks/_store/claims.py``); nothing between the worker and the SQL unpacks them.

Pure module: no I/O, no database imports.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ._retry import Outcome

_new = object.__new__


@dataclasses.dataclass(frozen=True)
class ClaimPosition:
    """Where a claim stopped in claim order: the last plain job it took."""

    priority: int
    run_at: datetime
    id: int


@dataclasses.dataclass(frozen=True)
class ClaimedJob:
    """A job as claimed: its lease is (worker_id, attempt)."""

    id: int
    task_name: str
    queue: str
    priority: int
    args: list[Any]
    kwargs: dict[str, Any]
    attempt: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    claimed_at: datetime
    worker_id: int
    #: The job's meta as claimed (a JSON object).
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Claimed by the limited claim (a concurrency or rate limit applies to it).
    limited: bool = False
    #: Why its args, kwargs or meta could not be decoded (None: they were): the job
    #: fails without running, with this reason (``cannot decode its arguments: …``).
    undecodable: str | None = None

    @property
    def job_id(self) -> int:
        return self.id

    @classmethod
    def from_row(cls, row: Mapping[str, Any], worker_id: int) -> ClaimedJob:
        return cls(
            id=row["id"],
            task_name=row["task_name"],
            queue=row["queue"],
            priority=row["priority"],
            args=row["args"],
            kwargs=row["kwargs"],
            attempt=row["attempts"],
            max_attempts=row["max_attempts"],
            run_at=row["run_at"],
            created_at=row["created_at"],
            claimed_at=row["claimed_at"],
            worker_id=worker_id,
            meta=row.get("meta") or {},
            limited=bool(row.get("limited", False)),
        )

    @property
    def position(self) -> ClaimPosition:
        """This job's place in claim order (a claim that took it last stopped there)."""
        return ClaimPosition(self.priority, self.run_at, self.id)


#: The names of ClaimedJob's fields.
CLAIMED_JOB_FIELDS = frozenset(field.name for field in dataclasses.fields(ClaimedJob))


def claim_order(job: ClaimedJob) -> tuple[int, datetime, int]:
    """Sort key of claimed jobs in claim order (priority DESC, run_at, id)."""
    return (-job.priority, job.run_at, job.id)


@dataclasses.dataclass(frozen=True)
class ClaimRequest:
    """What one claim asks for, for the lease owner ``worker_id``.

    ``queues``: the queues to claim from (None: all); ``excluded_queues``: queues left
    out (paused ones; None: none); ``task_names``: only jobs of these tasks (None: any);
    ``after``: read on from this position (None: from the start of claim order);
    ``limited``: claim jobs that limits apply to first (some limit is stored), then plain
    ones for the rest; ``aging``: seconds per level a due job's priority rises
    (``App(priority_aging=)``; None: claim order as stored); ``queue_aging``: the queues
    with an interval of their own (``app.queue(name, priority_aging=)``), as pairs.
    """

    worker_id: int
    limit: int
    queues: tuple[str, ...] | None = None
    excluded_queues: tuple[str, ...] | None = None
    task_names: tuple[str, ...] | None = None
    after: ClaimPosition | None = None
    limited: bool = False
    aging: float | None = None
    queue_aging: tuple[tuple[str, float], ...] = ()

    def for_worker(self, worker_id: int) -> ClaimRequest:
        """This request for another lease owner (the worker registered again)."""
        if worker_id == self.worker_id:
            return self
        return dataclasses.replace(self, worker_id=worker_id)

    def plain(self, limit: int) -> ClaimRequest:
        """The plain claim of ``limit`` jobs that follows a limited one."""
        return dataclasses.replace(self, limit=limit, limited=False)


@dataclasses.dataclass(frozen=True)
class Finish:
    """One attempt's end as the store writes it, fenced by its lease (``worker_id``,
    ``attempt``): the job's next ``status``, its encoded result, the error text and the
    exception's class path, and the delay of a retry."""

    job_id: int
    worker_id: int
    attempt: int
    status: str
    result_json: str | None = None
    error: str | None = None
    delay: float = 0.0
    exception_type: str | None = None
    #: The attempt's log lines, JSON (stored in meta "pgtasks.logs" under its number).
    logs_json: str | None = None
    #: The job is one of a sequence (sequence_key=): its end may hand the key's turn over.
    sequence: bool = False

    @classmethod
    def of(cls, job: ClaimedJob, outcome: Outcome) -> Finish:
        """The finish of ``job``'s attempt ending in ``outcome`` (built without the frozen
        dataclass's ``__init__``: one per job on the worker's hot path)."""
        finish: Finish = _new(cls)
        finish.__dict__.update(
            job_id=job.id,
            worker_id=job.worker_id,
            attempt=job.attempt,
            status=outcome.status,
            result_json=outcome.result_json,
            error=outcome.error,
            delay=outcome.delay,
            exception_type=outcome.exception_type if outcome.error is not None else None,
            logs_json=outcome.logs_json,
            # A hand-written meta may be any JSON (or NULL): only an object names a key.
            sequence=type(job.meta) is dict and "pgtasks.sequence" in job.meta,
        )
        return finish


@dataclasses.dataclass(frozen=True)
class LimitedClaimReport:
    """What a limited claim (claim_limited) says besides its jobs.

    ``wait``: seconds until the next rate token that held a job back is due (None when
    no rate did); ``blocked``: the names of the limits that held jobs back for want of
    room; ``error``: the database error that ended the claim (nothing was claimed then);
    ``plain_error``: the error of the plain claim that followed the limited one in a
    round trip of its own (the limited claim's finishes and jobs stand; the plain claim
    is tried again).
    """

    wait: float | None = None
    blocked: tuple[str, ...] = ()
    error: str | None = None
    plain_error: str | None = None

    @classmethod
    def from_values(cls, values: object) -> LimitedClaimReport:
        """The report of claim_limited's report row (its meta: a JSON object; anything
        else reads as an empty report)."""
        if not isinstance(values, dict):
            return cls()
        wait = values.get("wait")
        blocked = values.get("blocked")
        error = values.get("error")
        return cls(
            wait=float(wait) if isinstance(wait, (int, float)) else None,
            blocked=tuple(str(name) for name in blocked) if isinstance(blocked, list) else (),
            error=str(error) if error is not None else None,
        )


#: The report of a round trip whose claim was not limited (or took all it asked for).
NO_REPORT = LimitedClaimReport()


@dataclasses.dataclass(frozen=True)
class RoundTrip:
    """What one round trip did: the status written per finished job whose lease held (a
    job missing from ``written`` had lost its lease: nothing was written), and the jobs
    it claimed, those of the limited claim first, then plain ones in claim order; for a
    limited claim, what held limited jobs back or the error that ended it (``report``);
    the jobs its finish handed over (``handed``)."""

    written: Mapping[int, str]
    claimed: Sequence[ClaimedJob]
    report: LimitedClaimReport = NO_REPORT
    #: Jobs of sequences whose heads this round trip ended, handed to the worker running
    #: (a claim's lease each) by the finish itself, besides the claim (no claim order).
    handed: Sequence[ClaimedJob] = ()
