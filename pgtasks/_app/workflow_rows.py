"""A workflow step's job: validated and encoded from its signature (before anything is
written), and the meta an instrumentation gives the steps' jobs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from .._errors import WorkflowError
from .._jobs import JobSpec, StepJob
from .._payload import encode_arguments
from .._validation import validate_max_attempts, validate_priority, validate_queue
from .limits import QueueLimits, job_limits

#: The keyword names of arguments without keywords.
_NO_NAMES: frozenset[str] = frozenset()

if TYPE_CHECKING:
    from .workflows import Signature


class StepsApp(Protocol):
    """What encoding a workflow step reads of an App: its tasks, its payload limit and
    its queues' limits."""

    @property
    def tasks(self) -> Mapping[str, object]: ...

    @property
    def max_payload_bytes(self) -> int: ...

    @property
    def queue_limits(self) -> Mapping[str, QueueLimits]: ...


def encode_step(app: StepsApp, signature: Signature, receives_input: int, label: str) -> JobSpec:
    """The job of a signature, validated and encoded (raises before writing);
    ``receives_input``: how many inputs it receives before its own arguments (a bool: 1)."""
    task = signature.task
    if app.tasks.get(task.name) is not task:
        raise WorkflowError(f"task {task.name!r} of {signature!r} is not registered with this app")
    # A step that receives an input gets it as its first positional argument.
    placeholder = (None,) * int(receives_input)
    # Whether arguments bind depends only on their count and keyword names: each shape is
    # checked once per task (a group repeats one shape a million times), as enqueues do.
    kwargs = signature.kwargs
    shape = (len(placeholder) + len(signature.args), frozenset(kwargs) if kwargs else _NO_NAMES)
    if shape not in task._valid_shapes:
        try:
            task.signature.bind(*placeholder, *signature.args, **kwargs)
        except TypeError as error:
            received = " (after the input it receives first)" if receives_input else ""
            raise WorkflowError(
                f"arguments of {label} {signature!r}{received} do not match task"
                f" {task.name!r}: {error}"
            ) from None
        if len(task._valid_shapes) < 1024:
            task._valid_shapes.add(shape)
    args_json, kwargs_json = encode_arguments(
        task.name,
        signature.args,
        signature.kwargs,
        max_bytes=app.max_payload_bytes,
        parameter_names=task.parameter_names[len(placeholder) :],
    )
    options = signature.options
    try:
        queue = validate_queue(options["queue"]) if "queue" in options else task.queue
        priority = (
            validate_priority(options["priority"]) if "priority" in options else task.priority
        )
        max_attempts = (
            validate_max_attempts(options["max_attempts"])
            if "max_attempts" in options
            else task.max_attempts
        )
    except (TypeError, ValueError) as error:
        raise WorkflowError(f"options of {label} {signature!r}: {error}") from None
    limit_groups, limit_key = _limits(app, signature, queue, bool(receives_input), label)
    return JobSpec(
        task.name,
        queue,
        priority,
        args_json,
        kwargs_json,
        max_attempts,
        limit_groups=None if limit_groups is None else tuple(limit_groups),
        limit_key=limit_key,
    )


def _limits(
    app: StepsApp, signature: Signature, queue: str, receives_input: bool, label: str
) -> tuple[list[str] | None, str | None]:
    """The concurrency and rate limits a step counts in, as a plain enqueue computes them."""
    task_limits = signature.task.limits
    queue_limits = app.queue_limits.get(queue)
    if task_limits is None and queue_limits is None:
        return None, None
    if receives_input and task_limits is not None and task_limits.concurrency_key is not None:
        # The key is computed from the arguments when the workflow is written; the input
        # this step receives from the step before does not exist yet.
        raise WorkflowError(
            f"{label} {signature!r}: task {signature.task.name!r} has a concurrency_key=, which"
            " needs all of the job's arguments when the workflow is written; make the step"
            " immutable (.si()) so that it does not receive the previous result"
        )
    return job_limits(task_limits, queue_limits, signature.args, signature.kwargs)


def with_meta(steps: Sequence[StepJob], specs: Sequence[JobSpec]) -> list[StepJob]:
    """``steps`` with the meta the instrumentation gave their jobs (``specs``, in order)."""
    if len(specs) != len(steps):
        raise RuntimeError("the instrumentation changed the number of workflow steps")
    return [
        dataclasses.replace(step, spec=dataclasses.replace(step.spec, meta_json=spec.meta_json))
        for step, spec in zip(steps, specs, strict=True)
    ]
