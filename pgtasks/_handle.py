"""JobHandle: what enqueueing returns, a reference to one job row by id."""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

from ._errors import JobNotFoundError
from ._jobs import JobRow, JobStatus

if TYPE_CHECKING:
    from ._app import App

R = TypeVar("R")


class JobHandle(Generic[R]):
    """A job by id. ``existed`` is True when an idempotency key matched an existing job."""

    __slots__ = ("app", "existed", "id")

    def __init__(self, app: App, job_id: int, *, existed: bool = False) -> None:
        self.app = app
        self.id = job_id
        self.existed = existed

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
        status = self.app._run(
            lambda conn: self.app.store.get_job_status(conn, self.id), describe="status"
        )
        if status is None:
            raise self._missing()
        return status

    async def astatus(self) -> JobStatus:
        status = await self.app._arun(
            lambda conn: self.app.store.aget_job_status(conn, self.id), describe="status"
        )
        if status is None:
            raise self._missing()
        return status

    def fetch(self) -> JobRow:
        """A snapshot of the whole job row."""
        row = self.app._run(lambda conn: self.app.store.get_job(conn, self.id), describe="fetch")
        if row is None:
            raise self._missing()
        return row

    async def afetch(self) -> JobRow:
        row = await self.app._arun(
            lambda conn: self.app.store.aget_job(conn, self.id), describe="fetch"
        )
        if row is None:
            raise self._missing()
        return row
