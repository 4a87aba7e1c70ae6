"""Celery's task states (``from pgtasks.celery import states``), read from pgtasks' job
statuses: pending/waiting -> PENDING (RETRY after a failed attempt), running -> STARTED
(or the state a task set with ``update_state``), done -> SUCCESS, failed -> FAILURE,
cancelled (revoked, expired) -> REVOKED."""

from __future__ import annotations

PENDING = "PENDING"
RECEIVED = "RECEIVED"
STARTED = "STARTED"
SUCCESS = "SUCCESS"
FAILURE = "FAILURE"
REVOKED = "REVOKED"
REJECTED = "REJECTED"
RETRY = "RETRY"
IGNORED = "IGNORED"

READY_STATES = frozenset({SUCCESS, FAILURE, REVOKED})
UNREADY_STATES = frozenset({PENDING, RECEIVED, STARTED, REJECTED, RETRY})
EXCEPTION_STATES = frozenset({RETRY, FAILURE, REVOKED})
PROPAGATE_STATES = frozenset({FAILURE, REVOKED})
ALL_STATES = frozenset({PENDING, RECEIVED, STARTED, SUCCESS, FAILURE, RETRY, REVOKED})


def from_status(status: str, attempts: int = 0, custom: str | None = None) -> str:
    """The Celery state of a job of ``status`` after ``attempts`` attempts; ``custom``:
    the state its running attempt set with ``update_state``."""
    if status in ("pending", "waiting"):
        return RETRY if attempts > 0 else PENDING
    if status == "running":
        return custom or STARTED
    if status == "done":
        return SUCCESS
    if status == "failed":
        return FAILURE
    return REVOKED
