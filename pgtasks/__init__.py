"""pgtasks: Celery-style background tasks whose only infrastructure is PostgreSQL."""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
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
        ServerVersionError,
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

#: Where each public name lives: ``import pgtasks`` (and every ``pgtasks`` command, whose
#: modules import ``pgtasks`` first) loads none of them; the first use of a name imports
#: its module (``from pgtasks import App`` as before). tests/test_package_imports.py keeps
#: this table and the imports above the same.
_PUBLIC: dict[str, str] = {
    "App": "._app.app",
    "Debounce": "._app.debounce",
    "JobHandle": "._app.handle",
    **dict.fromkeys(("flow_state", "release_sequence"), "._app.keyed_admin"),
    "Store": "._app.layout",
    "AppOptions": "._app.settings",
    **dict.fromkeys(("Task", "TaskOptions"), "._app.tasks"),
    **dict.fromkeys(
        (
            "Chain",
            "Chord",
            "Group",
            "GroupResult",
            "Signature",
            "WorkflowResult",
            "chain",
            "chord",
            "group",
        ),
        "._app.workflows",
    ),
    **dict.fromkeys(("Batch", "BatchJob"), "._batches"),
    **dict.fromkeys(("PeriodicOptions", "Schedule"), "._cron"),
    **dict.fromkeys(
        ("EventTimeout", "Snooze", "StepError", "StepFailed", "StepMismatchError", "StepNameError"),
        "._durable",
    ),
    **dict.fromkeys(
        (
            "ConfigurationError",
            "CrossStoreError",
            "DatabaseError",
            "DatabaseUnavailableError",
            "EmbeddedUnavailableError",
            "JobCancelled",
            "JobNotFoundError",
            "JobNotPendingError",
            "LeaseLostError",
            "LimitChangeError",
            "LimitKeyError",
            "MigrationLockError",
            "NaiveDatetimeError",
            "PayloadError",
            "PayloadNotSerializableError",
            "PayloadTooDeepError",
            "PayloadTooLargeError",
            "PgTasksError",
            "PoolChangeError",
            "PoolExhaustedError",
            "ReservedMetaKeyError",
            "SchemaError",
            "SchemaNotMigratedError",
            "SchemaTooNewError",
            "ServerVersionError",
            "SoftTimeLimitExceeded",
            "TaskFailed",
            "TaskRegistrationError",
            "UniqueKeyTakenError",
            "UniquenessError",
            "UnknownTaskError",
            "WorkerLostError",
            "WorkflowError",
            "WorkflowFailed",
            "WorkflowNotFoundError",
            "WorkflowProtectedError",
        ),
        "._errors",
    ),
    **dict.fromkeys(
        ("AttemptError", "CancelResult", "JobContext", "JobRow", "JobSpec", "JobStatus"), "._jobs"
    ),
    "JsonFormatter": "._logging",
    "Progress": "._progress",
    **dict.fromkeys(("Discard", "Retry"), "._retry"),
    "Beat": "._worker.beat",
    "WorkerEvents": "._worker.events",
    "WorkerMetrics": "._worker.metrics",
    "WorkerOptions": "._worker.settings",
    "Worker": "._worker.worker",
}


def __getattr__(name: str) -> object:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})


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
    "ServerVersionError",
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
