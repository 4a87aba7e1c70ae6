"""Running one batch of a batch task (docs/howto/flow-control.md, "Batches"): the
handler called once with its jobs, and an Outcome per job.

No I/O: the worker's batch service (``pgtasks/_worker/batches.py``) claims the jobs and
writes the outcomes, each fenced by its own lease.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import _retry
from .._batches import BatchJob
from .._retry import Outcome
from .joblogs import CURRENT, AttemptLog, JobLogs, attach
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


def run_batch(
    task: Task[Any, Any], jobs: Sequence[ClaimedJob], logs: JobLogs | None = None
) -> list[Outcome]:
    """Call ``task``'s handler once with the jobs it can run; an Outcome per job, in
    order. A job whose arguments cannot be read fails alone, without reaching the handler.
    ``logs`` (capturing): what the handler logs is attached to each job it was handed."""
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
    if not items:
        return [outcome for outcome in outcomes if outcome is not None]
    log = AttemptLog(logs.limits, logs.secrets) if logs is not None and logs.started else None
    if task.timeout is None:
        finished, raised = True, _call(task, items, log)
    else:
        finished, raised = _call_within(task, items, task.timeout, log)
    policy = policy_of(task)
    # Undecided jobs of a handler that returned: done, result None (one outcome for all).
    returned = outcome_of_return(task, None) if finished and raised is None else None
    for index, job, item in items:
        if finished:
            if returned is not None and item.decision is None:
                outcome = returned
            else:
                outcome = _outcome(task, job, item, raised)
        else:
            # Past its timeout: every job of the batch ends with TimeoutError, retried per
            # the task's policy (retry_timeouts=), whatever the handler decided so far.
            outcome = _retry.after_timeout(
                task.timeout or 0.0,
                attempt=job.attempt,
                max_attempts=job.max_attempts,
                policy=policy,
            )
        outcomes[index] = outcome if log is None else attach(log, outcome)
    return [outcome for outcome in outcomes if outcome is not None]


#: The jobs a batch hands its handler: (position in the batch, claimed job, BatchJob).
Items = Sequence[tuple[int, "ClaimedJob", BatchJob]]


def _call(task: Task[Any, Any], items: Items, log: AttemptLog | None) -> Exception | None:
    """Call the handler with the jobs, capturing its log lines in ``log`` (on this
    thread); the exception it raised, if any."""
    token = CURRENT.set(log)
    try:
        task.function([item for _, _, item in items])
    except Exception as error:
        logger.warning(
            "batch of task %s (%d jobs) raised %s; its undecided jobs end with it",
            task.name,
            len(items),
            type(error).__name__,
        )
        return error
    finally:
        CURRENT.reset(token)
    return None


def _call_within(
    task: Task[Any, Any], items: Items, timeout: float, log: AttemptLog | None
) -> tuple[bool, Exception | None]:
    """Call the handler on a thread of its own, waiting up to ``timeout`` seconds for it:
    whether it returned by then, and the exception it raised. A handler past its timeout
    is abandoned (Python cannot stop a thread: it runs on, its decisions ignored), as the
    thread executor abandons a job past its timeout."""
    raised: list[Exception | None] = []
    thread = threading.Thread(
        target=lambda: raised.append(_call(task, items, log)),
        name=f"pgtasks-batch-{task.name}",
        daemon=True,
    )
    thread.start()
    thread.join(timeout)
    if thread.is_alive() or not raised:
        logger.warning(
            "batch of task %s (%d jobs) passed its timeout of %g s: abandoned, its jobs"
            " end with TimeoutError",
            task.name,
            len(items),
            timeout,
        )
        return False, None
    return True, raised[0]
