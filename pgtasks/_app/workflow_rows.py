"""A workflow step's job columns: validated and encoded from its signature (before anything
is written), and the steps as the jobs an instrumentation sees."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._errors import WorkflowError
from .._jobs import JobSpec
from .._payload import encode_arguments
from .limits import job_limits

if TYPE_CHECKING:
    from .app import App
    from .workflows import Signature


def encode_step(app: App, signature: Signature, receives_input: bool, label: str) -> dict[str, Any]:
    """The job columns of a signature, validated and encoded (raises before writing)."""
    task = signature.task
    if app.tasks.get(task.name) is not task:
        raise WorkflowError(f"task {task.name!r} of {signature!r} is not registered with this app")
    # A step that receives an input gets it as its first positional argument.
    placeholder = (None,) if receives_input else ()
    try:
        task.signature.bind(*placeholder, *signature.args, **signature.kwargs)
    except TypeError as error:
        received = " (after the input it receives first)" if receives_input else ""
        raise WorkflowError(
            f"arguments of {label} {signature!r}{received} do not match task {task.name!r}: {error}"
        ) from None
    args_json, kwargs_json = encode_arguments(
        task.name,
        signature.args,
        signature.kwargs,
        max_bytes=app.max_payload_bytes,
        parameter_names=task.parameter_names[len(placeholder) :],
    )
    options = signature.options
    try:
        spec = (
            task.build_spec((*placeholder, *signature.args), signature.kwargs, **options)
            if options
            else None
        )
    except (TypeError, ValueError) as error:
        raise WorkflowError(f"options of {label} {signature!r}: {error}") from None
    queue = spec.queue if spec else task.queue
    limit_groups, limit_key = _limits(app, signature, queue, receives_input, label)
    return {
        "task_name": task.name,
        "queue": queue,
        "priority": spec.priority if spec else task.priority,
        "max_attempts": spec.max_attempts if spec else task.max_attempts,
        "args_json": args_json,
        "kwargs_json": kwargs_json,
        "limit_groups": limit_groups,
        "limit_key": limit_key,
    }


def _limits(
    app: App, signature: Signature, queue: str, receives_input: bool, label: str
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


def step_specs(rows: Sequence[dict[str, Any]]) -> list[JobSpec]:
    """The steps as the jobs an instrumentation sees (tracing adds their meta)."""
    return [
        JobSpec(
            row["task_name"],
            row["queue"],
            row["priority"],
            row["args_json"],
            row["kwargs_json"],
            row["max_attempts"],
        )
        for row in rows
    ]


def take_meta(rows: Sequence[dict[str, Any]], specs: Sequence[JobSpec]) -> None:
    if len(specs) != len(rows):
        raise RuntimeError("the instrumentation changed the number of workflow steps")
    for row, spec in zip(rows, specs, strict=True):
        row["meta_json"] = spec.meta_json
