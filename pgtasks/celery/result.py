"""Results: ``AsyncResult`` and ``GroupResult`` read the job rows (there is no result
backend: the row holds the result, the error and the state), ``EagerResult`` holds the
outcome of an eager run."""

from __future__ import annotations

import builtins
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .._errors import JobCancelled, JobNotFoundError, TaskFailed
from .._jobs import JobRow
from .._retry import TIMED_OUT
from ._state import current_app
from .exceptions import TaskRevokedError, TimeLimitExceeded, TimeoutError
from .states import FAILURE, PENDING, READY_STATES, REVOKED, SUCCESS, from_status
from .task import current_request

if TYPE_CHECKING:
    from .app import Celery

SYNC_SUBTASK_ERROR = (
    "Never call result.get() within a task!\nSee"
    " https://docs.celeryq.dev/en/latest/userguide/tasks.html"
    "#avoid-launching-synchronous-subtasks"
)


def _check_not_in_task(disable_sync_subtasks: bool) -> None:
    request = current_request()
    in_task = request is not None and not request.is_eager and not request.called_directly
    if disable_sync_subtasks and in_task:
        raise RuntimeError(SYNC_SUBTASK_ERROR)


def exception_of(row: JobRow) -> BaseException:
    """The exception a failed job's row describes: its class when that class is already
    imported in this process (nothing is imported from a row), else TaskFailed; an
    attempt past its hard time limit is Celery's TimeLimitExceeded."""
    failure = TaskFailed(row.id, row.last_error)
    if (row.last_error or "").startswith(TIMED_OUT):
        limit = TimeLimitExceeded(failure.message)
        limit.__cause__ = failure
        return limit
    path = next(
        (entry.exception_type for entry in reversed(row.attempts_history) if entry.exception_type),
        None,
    )
    if path:
        module_name, _, qualname = path.rpartition(".")
        kind: Any = sys.modules.get(module_name)
        for part in qualname.split("."):
            kind = getattr(kind, part, None)
        if isinstance(kind, type) and issubclass(kind, Exception):
            message = _message(row.last_error or "", qualname.rsplit(".", 1)[-1], path)
            try:
                error = kind(message) if message else kind()
            except Exception:  # a constructor of other arguments: the generic form
                return failure
            error.__cause__ = failure
            return error
    return failure


def _message(text: str, short: str, path: str) -> str:
    """The exception's message in a stored error (the lines from ``Type: `` to the end:
    a message may span lines)."""
    lines = text.splitlines()
    for index in range(len(lines) - 1, -1, -1):
        head, separator, rest = lines[index].partition(": ")
        if separator and head in (short, path):
            return "\n".join([rest, *lines[index + 1 :]])
    return ""


class AsyncResult:
    """A task's result by id (a job id; ``app.AsyncResult(id)``)."""

    def __init__(
        self,
        id: str | int,
        backend: Any = None,
        task_name: str | None = None,
        app: Celery | None = None,
        parent: AsyncResult | None = None,
    ) -> None:
        self.app = app if app is not None else current_app()
        self.id = str(id)
        self.task_id = self.id
        self._name = task_name
        self.parent = parent
        self.children: list[AsyncResult] | None = None

    def __repr__(self) -> str:
        return f"<AsyncResult: {self.id}>"

    def __str__(self) -> str:
        return self.id

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AsyncResult):
            return other.id == self.id
        return isinstance(other, str) and other == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    # -- the row --
    def _job_id(self) -> int | None:
        """The job's id: the id itself, or the job a ``task_id=`` of the caller's names
        (its idempotency key)."""
        if self.id.isascii() and self.id.isdigit():
            number = int(self.id)
            return number if number < 2**63 else None  # past bigint: no such job
        native = self.app.native
        return native.database.run(lambda conn: native.queries.get_job_id_by_key(conn, self.id))

    def _row(self) -> JobRow | None:
        job_id = self._job_id()
        if job_id is None:
            return None
        try:
            return self.app.native.get_job(job_id).fetch()
        except JobNotFoundError:
            return None

    @property
    def name(self) -> str | None:
        if self._name is None:
            row = self._row()
            self._name = row.task_name if row is not None else None
        return self._name

    @property
    def state(self) -> str:
        row = self._row()
        if row is None:
            return PENDING
        custom = row.meta.get("celery.state") if row.status == "running" else None
        return from_status(row.status, row.attempts, custom if isinstance(custom, str) else None)

    status = state

    def ready(self) -> bool:
        return self.state in READY_STATES

    def successful(self) -> bool:
        return self.state == SUCCESS

    def failed(self) -> bool:
        return self.state == FAILURE

    @property
    def result(self) -> Any:
        """The return value, the exception (failed, revoked) or the progress meta."""
        row = self._row()
        if row is None:
            return None
        if row.status == "done":
            return row.result
        if row.status == "failed":
            return exception_of(row)
        if row.status == "cancelled":
            return TaskRevokedError(row.last_error or "revoked")
        if row.status == "running":
            return row.meta.get("celery.info")
        if row.attempts > 0 and row.last_error:
            return TaskFailed(row.id, row.last_error)  # waiting for its retry
        return None

    info = result

    @property
    def traceback(self) -> str | None:
        row = self._row()
        if row is None or row.status not in ("failed", "cancelled", "pending"):
            return None
        return row.last_error

    @property
    def date_done(self) -> datetime | None:
        row = self._row()
        return row.finished_at if row is not None else None

    @property
    def args(self) -> list[Any] | None:
        row = self._row()
        return row.args if row is not None else None

    @property
    def kwargs(self) -> dict[str, Any] | None:
        row = self._row()
        return row.kwargs if row is not None else None

    def get(
        self,
        timeout: float | None = None,
        propagate: bool = True,
        interval: float = 0.5,
        no_ack: bool = True,
        follow_parents: bool = True,
        callback: Any = None,
        on_message: Any = None,
        on_interval: Any = None,
        disable_sync_subtasks: bool = True,
        **kwargs: Any,
    ) -> Any:
        """Wait for the result (pgtasks wakes on the job's NOTIFY, polling as a fallback);
        a failure re-raises the task's exception (when its class is imported here, else
        TaskFailed) unless ``propagate=False``; TimeoutError after ``timeout`` seconds."""
        _check_not_in_task(disable_sync_subtasks)
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._row() is None:
            # Celery waits for an unknown id (PENDING): so does this, until the timeout.
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"the operation timed out waiting for {self.id}")
            time.sleep(max(0.05, min(interval, 1.0)))
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            value = self.app.native.get_job(self._job_id() or 0).get(timeout=remaining)
        except builtins.TimeoutError as waited:
            raise TimeoutError(str(waited)) from None
        except TaskFailed:
            row = self._row()
            failure = exception_of(row) if row is not None else TaskFailed(self._job_id())
            if propagate:
                raise failure from None
            return failure
        except JobCancelled as cancelled:
            revoked = TaskRevokedError(str(cancelled))
            if propagate:
                raise revoked from None
            return revoked
        if callback is not None:
            callback(self.id, value)
        return value

    wait = get

    def revoke(
        self,
        connection: Any = None,
        terminate: bool = False,
        signal: Any = None,
        wait: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Cancel the job: one not started never runs; with ``terminate=True`` a running
        one is cancelled too (pgtasks' cancellation of a running job)."""
        revoke(self.app, self.id, terminate=terminate)

    def forget(self) -> None:
        """Forget the stored result, as Celery's backend does: a finished job's row
        (result, error, traceback, its ``task_id`` key) is deleted, so this id reads
        ``PENDING`` again. A job not finished yet has no result to forget: it is left to
        run. A finished step of a workflow that is still running is kept (its later steps
        read its result): WorkflowProtectedError says so."""

        job_id = self._job_id()
        if job_id is None:
            return
        try:
            self.app.native.admin.delete_finished_job(job_id)
        except JobNotFoundError:
            return

    def then(self, callback: Any, on_error: Any = None, weak: bool = False) -> None:
        raise NotImplementedError("AsyncResult.then() (promises) is not supported by pgtasks")


def revoke(app: Celery, task_id: str, *, terminate: bool) -> str | None:
    """Cancel a job by id (``terminate``: a running one too); its status after, or None
    when no such job exists."""
    native = app.native
    job_id = AsyncResult(task_id, app=app)._job_id()
    if job_id is None:
        return None
    try:
        status = native.get_job(job_id).status()
    except JobNotFoundError:
        return None
    if status in ("pending", "waiting") or (terminate and status == "running"):
        return str(native.cancel(job_id, terminate=terminate).status)
    return str(status)


class ResultSet:
    """A list of results (``GroupResult``'s base)."""

    def __init__(self, results: Sequence[AsyncResult], app: Celery | None = None) -> None:
        self.results = list(results)
        self.app = app

    def __iter__(self) -> Iterator[AsyncResult]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, index: int) -> AsyncResult:
        return self.results[index]

    def completed_count(self) -> int:
        return sum(1 for result in self.results if result.successful())

    def forget(self) -> None:
        """Forget each result (:meth:`AsyncResult.forget`)."""
        for result in self.results:
            result.forget()

    def ready(self) -> bool:
        return all(result.ready() for result in self.results)

    def successful(self) -> bool:
        return all(result.successful() for result in self.results)

    def failed(self) -> bool:
        return any(result.failed() for result in self.results)

    def waiting(self) -> bool:
        return not self.ready()

    def revoke(self, terminate: bool = False, **kwargs: Any) -> None:
        for result in self.results:
            result.revoke(terminate=terminate)

    def get(
        self,
        timeout: float | None = None,
        propagate: bool = True,
        interval: float = 0.5,
        disable_sync_subtasks: bool = True,
        **kwargs: Any,
    ) -> list[Any]:
        _check_not_in_task(disable_sync_subtasks)
        deadline = None if timeout is None else time.monotonic() + timeout
        values = []
        for result in self.results:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            values.append(result.get(timeout=remaining, propagate=propagate, interval=interval))
        return values

    join = get

    @property
    def children(self) -> list[AsyncResult]:
        return self.results


class GroupResult(ResultSet):
    """The results of a group (or of a chord's header), in member order."""

    def __init__(
        self,
        id: str | int | None = None,
        results: Sequence[AsyncResult] | None = None,
        app: Celery | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(results or [], app)
        self.id = None if id is None else str(id)

    def __repr__(self) -> str:
        return f"<GroupResult: {self.id} [{', '.join(r.id for r in self.results)}]>"

    def save(self, backend: Any = None) -> None:
        """The group is kept in the workflow's rows already."""

    @classmethod
    def restore(cls, id: str, backend: Any = None, app: Celery | None = None) -> GroupResult:
        app = app or current_app()
        rows = app.native.database.run(
            lambda conn: app.native.queries.get_workflow_jobs(conn, int(id))
        )
        ends = [row for row in rows if not row.get("next_ids")]
        return cls(id, [AsyncResult(str(row["id"]), app=app) for row in ends], app=app)


class EagerResult(AsyncResult):
    """The outcome of a task run here (``apply()``, ``task_always_eager``)."""

    def __init__(self, id: str, value: Any, state: str, name: str | None = None) -> None:
        self.id = self.task_id = str(id)
        self._value = value
        self._state = state
        self._name = name
        self.parent = None
        self.children = None
        self._traceback: str | None = None
        if isinstance(value, BaseException):
            import traceback

            self._traceback = "".join(
                traceback.format_exception(type(value), value, value.__traceback__)
            )

    def __repr__(self) -> str:
        return f"<EagerResult: {self.id}>"

    @property
    def state(self) -> str:
        return self._state

    status = state

    @property
    def result(self) -> Any:
        return self._value

    info = result

    @property
    def traceback(self) -> str | None:
        return self._traceback

    def get(  # type: ignore[override]
        self, timeout: float | None = None, propagate: bool = True, **kwargs: Any
    ) -> Any:
        if self._state == FAILURE and propagate:
            raise self._value
        return self._value

    wait = get  # type: ignore[assignment]

    def revoke(self, *args: Any, **kwargs: Any) -> None:
        self._state = REVOKED

    def forget(self) -> None:
        """Nothing is stored for an eager run: nothing to forget."""
