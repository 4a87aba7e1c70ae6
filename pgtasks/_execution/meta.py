"""The write behind JobContext.update_meta / set_progress: one UPDATE fenced by the lease.

Thread and async jobs write through the worker's App (its pool); a process-pool child
through the App it imported (a pool of its own, opened on first use).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._app.app import App
from .._errors import LeaseLostError


def meta_writer(
    app: App | None,
    job_id: int,
    worker_id: int,
    attempt: int,
    on_refused: Callable[[], None] | None = None,
) -> Callable[[dict[str, Any]], None] | None:
    """A function merging a patch into the job's meta under this lease (None without app);
    ``on_refused`` is called when the fence refuses the write (the lease is lost)."""
    if app is None:
        return None

    def write(patch: dict[str, Any]) -> None:
        if app.update_job_meta(job_id, worker_id=worker_id, attempt=attempt, patch=patch):
            return
        if on_refused is not None:
            on_refused()
        raise LeaseLostError(
            f"job {job_id}: attempt {attempt} on worker {worker_id} no longer holds the"
            " job (it was rescued, finished, cancelled or released meanwhile): its meta"
            " was not updated; stop this attempt"
        )

    return write
