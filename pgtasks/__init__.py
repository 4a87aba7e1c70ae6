"""pgtasks: Celery-style background tasks whose only infrastructure is PostgreSQL."""

from __future__ import annotations

from ._app.app import App
from ._app.debounce import Debounce
from ._app.handle import JobHandle
from ._app.keyed_admin import flow_state, release_sequence
from ._app.layout import Store
from ._app.settings import AppOptions
from ._app.tasks import Task, TaskOptions
from ._app.workflows import (
    Chain,
    Chord,
    Group,
    GroupResult,
    Signature,
    WorkflowResult,
    chain,
    chord,
    group,
)
from ._batches import Batch, BatchJob
from ._cron import PeriodicOptions, Schedule
from ._durable import (
    EventTimeout,
    Snooze,
    StepError,
    StepFailed,
    StepMismatchError,
    StepNameError,
)
from ._errors import (
    ConfigurationError,
    CrossStoreError,
    DatabaseError,
    DatabaseUnavailableError,
    EmbeddedUnavailableError,
    JobCancelled,
    JobNotFoundError,
    JobNotPendingError,
    LeaseLostError,
    LimitChangeError,
    LimitKeyError,
    MigrationLockError,
    NaiveDatetimeError,
    PayloadError,
    PayloadNotSerializableError,
    PayloadTooDeepError,
    PayloadTooLargeError,
    PgTasksError,
    PoolChangeError,
    PoolExhaustedError,
    ReservedMetaKeyError,
    SchemaError,
    SchemaNotMigratedError,
    SchemaTooNewError,
    SoftTimeLimitExceeded,
    TaskFailed,
    TaskRegistrationError,
    UniqueKeyTakenError,
    UniquenessError,
    UnknownTaskError,
    WorkerLostError,
    WorkflowError,
    WorkflowFailed,
    WorkflowNotFoundError,
    WorkflowProtectedError,
)
from ._jobs import AttemptError, CancelResult, JobContext, JobRow, JobSpec, JobStatus
from ._logging import JsonFormatter
from ._progress import Progress
from ._retry import Discard, Retry
from ._worker.beat import Beat
from ._worker.events import WorkerEvents
from ._worker.metrics import WorkerMetrics
from ._worker.settings import WorkerOptions
from ._worker.worker import Worker

__version__ = "0.1.0"

__all__ = [
    "App",
    "AppOptions",
    "AttemptError",
    "Batch",
    "BatchJob",
    "Beat",
    "CancelResult",
    "Chain",
    "Chord",
    "ConfigurationError",
    "CrossStoreError",
    "DatabaseError",
    "DatabaseUnavailableError",
    "Debounce",
    "Discard",
    "EmbeddedUnavailableError",
    "EventTimeout",
    "Group",
    "GroupResult",
    "JobCancelled",
    "JobContext",
    "JobHandle",
    "JobNotFoundError",
    "JobNotPendingError",
    "JobRow",
    "JobSpec",
    "JobStatus",
    "JsonFormatter",
    "LeaseLostError",
    "LimitChangeError",
    "LimitKeyError",
    "MigrationLockError",
    "NaiveDatetimeError",
    "PayloadError",
    "PayloadNotSerializableError",
    "PayloadTooDeepError",
    "PayloadTooLargeError",
    "PeriodicOptions",
    "PgTasksError",
    "PoolChangeError",
    "PoolExhaustedError",
    "Progress",
    "ReservedMetaKeyError",
    "Retry",
    "Schedule",
    "SchemaError",
    "SchemaNotMigratedError",
    "SchemaTooNewError",
    "Signature",
    "Snooze",
    "SoftTimeLimitExceeded",
    "StepError",
    "StepFailed",
    "StepMismatchError",
    "StepNameError",
    "Store",
    "Task",
    "TaskFailed",
    "TaskOptions",
    "TaskRegistrationError",
    "UniqueKeyTakenError",
    "UniquenessError",
    "UnknownTaskError",
    "Worker",
    "WorkerEvents",
    "WorkerLostError",
    "WorkerMetrics",
    "WorkerOptions",
    "WorkflowError",
    "WorkflowFailed",
    "WorkflowNotFoundError",
    "WorkflowProtectedError",
    "WorkflowResult",
    "__version__",
    "chain",
    "chord",
    "flow_state",
    "group",
    "release_sequence",
]
