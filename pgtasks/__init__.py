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
    JobNotFoundError,
    NaiveDatetimeError,
    PayloadError,
    PayloadNotSerializableError,
    PayloadTooLargeError,
    PgTasksError,
    SchemaError,
    SchemaNotMigratedError,
    SchemaTooNewError,
    TaskRegistrationError,
    UnknownTaskError,
)
from ._handle import JobHandle
from ._jobs import JobContext, JobRow, JobSpec, JobStatus
from ._retry import Discard, Retry
from ._tasks import Task, TaskOptions
from ._worker import Worker

__version__ = "0.1.0"

__all__ = [
    "App",
    "Beat",
    "ConfigurationError",
    "DatabaseError",
    "DatabaseUnavailableError",
    "Discard",
    "EmbeddedUnavailableError",
    "JobContext",
    "JobHandle",
    "JobNotFoundError",
    "JobRow",
    "JobSpec",
    "JobStatus",
    "NaiveDatetimeError",
    "PayloadError",
    "PayloadNotSerializableError",
    "PayloadTooLargeError",
    "PeriodicOptions",
    "PgTasksError",
    "Retry",
    "Schedule",
    "SchemaError",
    "SchemaNotMigratedError",
    "SchemaTooNewError",
    "Task",
    "TaskOptions",
    "TaskRegistrationError",
    "UnknownTaskError",
    "Worker",
    "__version__",
]
