"""pgtasks: Celery-style background tasks whose only infrastructure is PostgreSQL."""

from __future__ import annotations

from ._app import App
from ._beat import Beat
from ._cron import PeriodicOptions, Schedule
from ._errors import (
    ConfigurationError,
    DatabaseError,
    DatabaseUnavailableError,
    EmbeddedUnavailableError,
    JobCancelled,
    JobNotFoundError,
    NaiveDatetimeError,
    PayloadError,
    PayloadNotSerializableError,
    PayloadTooLargeError,
    PgTasksError,
    PoolExhaustedError,
    SchemaError,
    SchemaNotMigratedError,
    SchemaTooNewError,
    SoftTimeLimitExceeded,
    TaskFailed,
    TaskRegistrationError,
    UnknownTaskError,
)
from ._events import WorkerEvents
from ._handle import JobHandle
from ._jobs import CancelResult, JobContext, JobRow, JobSpec, JobStatus
from ._logging import JsonFormatter
from ._metrics import WorkerMetrics
from ._retry import Discard, Retry
from ._tasks import Task, TaskOptions
from ._worker import Worker

__version__ = "0.1.0"

__all__ = [
    "App",
    "Beat",
    "CancelResult",
    "ConfigurationError",
    "DatabaseError",
    "DatabaseUnavailableError",
    "Discard",
    "EmbeddedUnavailableError",
    "JobCancelled",
    "JobContext",
    "JobHandle",
    "JobNotFoundError",
    "JobRow",
    "JobSpec",
    "JobStatus",
    "JsonFormatter",
    "NaiveDatetimeError",
    "PayloadError",
    "PayloadNotSerializableError",
    "PayloadTooLargeError",
    "PeriodicOptions",
    "PgTasksError",
    "PoolExhaustedError",
    "Retry",
    "Schedule",
    "SchemaError",
    "SchemaNotMigratedError",
    "SchemaTooNewError",
    "SoftTimeLimitExceeded",
    "Task",
    "TaskFailed",
    "TaskOptions",
    "TaskRegistrationError",
    "UnknownTaskError",
    "Worker",
    "WorkerEvents",
    "WorkerMetrics",
    "__version__",
]
