"""Running one batch of a batch task (docs/howto/flow-control.md, "Batches"): the
handler called once with its jobs, and an Outcome per job.

No I/O: the worker's batch service (``pgtasks/_worker/batches.py``) claims the jobs and
writes the outcomes, each fenced by its own lease.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import _retry
from .._batches import BatchJob
from .._retry import Outcome
from .outcomes import (
    malformed_arguments_outcome,
    outcome_of_error,
    outcome_of_return,
    policy_of,
)

if TYPE_CHECKING:
    from .._app.tasks import Task
    from .._leases import ClaimedJob

logger = logging.getLogger("pgtasks.worker")


def _outcome(
    task: Task[Any, Any], job: ClaimedJob, item: BatchJob, raised: BaseException | None
) -> Outcome:
    decision, value = item.decision, item.value
    if decision is None:
        if raised is None:
            return outcome_of_return(task, None)
        return outcome_of_error(task, job.attempt, job.max_attempts, raised)
    if decision == "done":
        return outcome_of_return(task, value)
    if decision == "error":
        return outcome_of_error(task, job.attempt, job.max_attempts, value)
    if decision == "fail":
        return Outcome.failed(str(value))
    # retry
    error = "Retry: the batch handler asked for another attempt"
    if job.attempt >= job.max_attempts:
        return Outcome.failed(f"{error}, but this was the last ({job.max_attempts})")
    delay = value if value is not None else _retry.backoff(job.attempt, policy_of(task))
    return Outcome.retry(float(delay), error, "pgtasks.Retry")


def run_batch(task: Task[Any, Any], jobs: Sequence[ClaimedJob]) -> list[Outcome]:
    """Call ``task``'s handler once with the jobs it can run; an Outcome per job, in
    order. A job whose arguments cannot be read fails alone, without reaching the handler."""
    outcomes: list[Outcome | None] = []
    items: list[tuple[int, ClaimedJob, BatchJob]] = []
    for index, job in enumerate(jobs):
        refused = malformed_arguments_outcome(job.args, job.kwargs, job.undecodable)
        outcomes.append(refused)
        if refused is None:
            item = BatchJob(
                job.id,
                job.args,
                job.kwargs,
                attempt=job.attempt,
                max_attempts=job.max_attempts,
                queue=job.queue,
                meta=job.meta,
                worker_id=job.worker_id,
            )
            items.append((index, job, item))
    raised: BaseException | None = None
    if items:
        try:
            task.function([item for _, _, item in items])
        except Exception as error:
            raised = error
            logger.warning(
                "batch of task %s (%d jobs) raised %s; its undecided jobs end with it",
                task.name,
                len(items),
                type(error).__name__,
            )
    for index, job, item in items:
        outcomes[index] = _outcome(task, job, item, raised)
    return [outcome for outcome in outcomes if outcome is not None]
