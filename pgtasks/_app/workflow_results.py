"""The handles of an enqueued workflow: ``WorkflowResult`` and ``GroupResult``.

``get()`` waits for the jobs whose results make the workflow's result. When one of them
failed, or was not run because a step before it failed, it raises ``WorkflowFailed`` (a
``TaskFailed``) naming the step that failed; a workflow cancelled by a user raises
``JobCancelled``, with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import JobCancelled, TaskFailed, WorkflowFailed
from .._workflows_text import failed_step
from .handle import JobHandle

if TYPE_CHECKING:
    from .._store.base import Row
    from .app import App


class WorkflowResult:
    """A workflow by id; ``get()`` returns its result (the last step's; a list after a
    group), ``status`` reads its state, ``cancel()`` cancels what has not run."""

    def __init__(
        self, app: App, workflow_id: int, terminals: Sequence[JobHandle[Any]], *, kind: str
    ) -> None:
        self.app = app
        self.id = workflow_id
        self.kind = kind
        #: The jobs whose results make the workflow's result.
        self.results = list(terminals)
        #: Every job of the workflow, in plan order (the first step's first).
        self.job_ids: list[int] = [handle.id for handle in self.results]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} id={self.id} kind={self.kind}>"

    def _failure(self, job_id: int, jobs: Sequence[Mapping[str, Any]]) -> Exception:
        """What ``get()`` raises for a job of the result that failed or was cancelled."""
        failed = failed_step(jobs, job_id)
        if failed is not None:
            return WorkflowFailed(
                self.id,
                failed["workflow_step"],
                failed["task_name"],
                failed["id"],
                failed["last_error"],
            )
        row = next((job for job in jobs if job["id"] == job_id), None)
        return JobCancelled(job_id, row["last_error"] if row is not None else None)

    def _jobs(self) -> list[Row]:
        store = self.app.queries
        return self.app.database.run(lambda conn: store.get_workflow_jobs(conn, self.id))

    async def _ajobs(self) -> list[Row]:
        store = self.app.queries
        return await self.app.database.arun(lambda conn: store.aget_workflow_jobs(conn, self.id))

    def _wait(self, timeout: float | None) -> list[Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        values = []
        for job in self.results:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                values.append(job.get(timeout=remaining))
            except (TaskFailed, JobCancelled) as error:
                raise self._failure(job.id, self._jobs()) from error
        return values

    async def _await(self, timeout: float | None) -> list[Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        values = []
        for job in self.results:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                values.append(await job.aget(timeout=remaining))
            except (TaskFailed, JobCancelled) as error:
                raise self._failure(job.id, await self._ajobs()) from error
        return values

    async def aget(self, timeout: float | None = None) -> Any:
        """The async twin of :meth:`get`."""
        return (await self._await(timeout))[0]

    def get(self, timeout: float | None = None) -> Any:
        """Wait for the workflow's result. Raises WorkflowFailed (a TaskFailed) naming the
        step that failed when a step the result depends on failed, JobCancelled (with the
        reason) when the workflow was cancelled, TimeoutError after ``timeout`` seconds."""
        return self._wait(timeout)[0]

    @property
    def status(self) -> str:
        """``running`` while a job is unfinished, then ``done``, ``failed`` or ``cancelled``."""
        return str(self.app.get_workflow(self.id)["status"])

    def cancel(self) -> int:
        """Cancel every job that has not run (running ones are asked to stop); returns how
        many jobs were cancelled or asked to stop."""
        return self.app.cancel_workflow(self.id)


class GroupResult(WorkflowResult):
    """A workflow ending in a group: ``get()`` returns the members' results in order."""

    def get(self, timeout: float | None = None) -> list[Any]:
        return self._wait(timeout)

    async def aget(self, timeout: float | None = None) -> list[Any]:
        return await self._await(timeout)
