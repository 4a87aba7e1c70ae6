"""JobHandle: what enqueueing returns, a reference to one job row by id."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .._errors import JobNotFoundError, JobNotPendingError
from .._jobs import AttemptError, CancelResult, JobRow, JobStatus
from .._progress import Progress
from .results import await_result, wait_for_result

if TYPE_CHECKING:
    from .app import App

R = TypeVar("R")


class JobHandle(Generic[R]):
    """A job by id. ``existed`` is True when an idempotency key matched an existing job."""

    __slots__ = ("app", "existed", "id", "row")

    def __init__(self, app: App, job_id: int, *, existed: bool = False) -> None:
        self.app = app
        self.id = job_id
        self.existed = existed
        #: The last snapshot read by refresh() (None until then).
        self.row: JobRow | None = None

    def __repr__(self) -> str:
        return f"<JobHandle id={self.id}{' existed' if self.existed else ''}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobHandle) and other.app is self.app and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def _missing(self) -> JobNotFoundError:
        return JobNotFoundError(f"job {self.id} does not exist (it may have been pruned)")

    def status(self) -> JobStatus:
        """The job's current status, read from the database now."""
        status = self.app.database.run(lambda conn: self.app.queries.get_job_status(conn, self.id))
        if status is None:
            raise self._missing()
        return status

    async def astatus(self) -> JobStatus:
        status = await self.app.database.arun(
            lambda conn: self.app.queries.aget_job_status(conn, self.id)
        )
        if status is None:
            raise self._missing()
        return status

    def fetch(self) -> JobRow:
        """A snapshot of the whole job row."""
        row = self.app.database.run(lambda conn: self.app.queries.get_job(conn, self.id))
        if row is None:
            raise self._missing()
        return row

    async def afetch(self) -> JobRow:
        row = await self.app.database.arun(lambda conn: self.app.queries.aget_job(conn, self.id))
        if row is None:
            raise self._missing()
        return row

    # -- results --
    def get(self, timeout: float | None = None) -> R:
        """Wait for the job and return its result.

        Raises TaskFailed (remote type, message, traceback) when it failed, JobCancelled
        when cancelled, TimeoutError after ``timeout`` seconds, JobNotFoundError when the
        job does not exist (or was pruned while waiting).
        """
        return wait_for_result(self.app, self.id, timeout)  # type: ignore[no-any-return]

    async def aget(self, timeout: float | None = None) -> R:
        return await await_result(self.app, self.id, timeout)  # type: ignore[no-any-return]

    # -- cancellation --
    def cancel(self, *, terminate: bool = False) -> CancelResult:
        """Cancel the job (see App.cancel; ``terminate``: kill a running attempt)."""
        return self.app.cancel(self.id, terminate=terminate)

    async def acancel(self, *, terminate: bool = False) -> CancelResult:
        return await self.app.acancel(self.id, terminate=terminate)

    # -- job actions (pgtasks._app.job_actions) --
    def run_now(self, *, actor: str | None = None) -> bool:
        """A pending job scheduled later (a countdown, an eta, a retry's delay) becomes due
        now; no attempt is spent. False when it was due already; JobNotPendingError when it
        is not pending (it started meanwhile, or ended), JobNotFoundError. Audited."""
        outcome = self.app.run_jobs_now([self.id], actor=actor)
        return self._acted(bool(outcome.done), outcome.left, "run now")

    def snooze(self, by: timedelta | float, *, actor: str | None = None) -> None:
        """The pending job starts ``by`` (a timedelta or seconds) later than it would (from
        now when due already); no attempt is spent. JobNotPendingError when it is not
        pending, JobNotFoundError. Audited."""
        outcome = self.app.snooze_jobs([self.id], by, actor=actor)
        self._acted(bool(outcome.done), outcome.left, "snoozed")

    def edit(
        self,
        *,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        actor: str | None = None,
    ) -> None:
        """New ``args`` and/or ``kwargs`` of the pending job (the one not given is kept),
        checked as an enqueue checks them; JobNotPendingError when it started first.
        Audited."""
        self.app.edit_job_arguments(self.id, args=args, kwargs=kwargs, actor=actor)

    def _acted(self, done: bool, left: Mapping[int, str], action: str) -> bool:
        """True when the job changed, False when run now met a job due already;
        JobNotFoundError or JobNotPendingError for the others."""
        if done:
            return True
        reason = left.get(self.id, "not changed")
        if reason.startswith("does not exist"):
            raise self._missing()
        if reason == "is due already":
            return False
        raise JobNotPendingError(
            f"job {self.id} {reason}: only a pending job can be {action}; nothing was changed"
        )

    # -- snapshot --
    def refresh(self) -> JobHandle[R]:
        """Read the job's row now; the properties below show this snapshot."""
        self.row = self.fetch()
        return self

    async def arefresh(self) -> JobHandle[R]:
        self.row = await self.afetch()
        return self

    def _snapshot(self) -> JobRow:
        return self.row if self.row is not None else self.refresh().row  # type: ignore[return-value]

    @property
    def attempts(self) -> int:
        return self._snapshot().attempts

    @property
    def last_error(self) -> str | None:
        return self._snapshot().last_error

    @property
    def result(self) -> Any:
        return self._snapshot().result

    @property
    def run_at(self) -> datetime:
        return self._snapshot().run_at

    @property
    def created_at(self) -> datetime:
        return self._snapshot().created_at

    @property
    def finished_at(self) -> datetime | None:
        return self._snapshot().finished_at

    @property
    def started_at(self) -> datetime | None:
        """When the first attempt was claimed (None: not started yet)."""
        return self._snapshot().started_at

    @property
    def worker_id(self) -> int | None:
        """The worker that holds (or last held) the job: the last attempt's worker."""
        return self._snapshot().locked_by

    @property
    def meta(self) -> dict[str, Any]:
        """The job's meta (keys starting with ``pgtasks.`` are pgtasks' own)."""
        return self._snapshot().meta

    @property
    def progress(self) -> Progress | None:
        """The last progress the task reported (``ctx.set_progress``), or None.

        Like the other properties, from the last snapshot: poll with
        ``job.refresh().progress``.
        """
        return self._snapshot().progress

    @property
    def attempts_history(self) -> list[AttemptError]:
        """The attempts that ended with an error (retried, failed, timed out, worker lost),
        oldest first; the attempt that succeeded (if any) is not in it."""
        return self._snapshot().attempts_history
