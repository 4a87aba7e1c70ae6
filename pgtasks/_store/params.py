"""The parameters of the insert statements, built from JobSpecs: one place for the plain,
limited (``sql/limits.sql``) and scoped (``sql/unique.sql``) enqueue paths.

Single inserts take one value per column; batches one list per column, with args, kwargs
and meta as one JSON array text each (every element is valid JSON already: cheaper to
send than an array of texts).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

from .._jobs import JobBatch, JobSpec
from .base import Params


def job_params(spec: JobSpec) -> Params:
    """One job's columns (``insert_job``, ``insert_new_job``; the latter ignores the key)."""
    return {
        "task_name": spec.task_name,
        "queue": spec.queue,
        "priority": spec.priority,
        "args": spec.args_json,
        "kwargs": spec.kwargs_json,
        "max_attempts": spec.max_attempts,
        "run_at": spec.run_at,
        "delay": spec.delay_seconds,
        "idempotency_key": spec.idempotency_key,
        "meta": spec.meta_json,
    }


def batch_params(batch: JobBatch) -> Params:
    """``insert_batch_jobs``' parameters: the shared fields once, each job's args and
    kwargs as one JSON array (every element is valid JSON already)."""
    shared, arguments = batch.shared, batch.arguments
    return {
        "task_name": shared.task_name,
        "queue": shared.queue,
        "priority": shared.priority,
        "max_attempts": shared.max_attempts,
        "meta": shared.meta_json,
        "args": "[" + ",".join([args for args, _ in arguments]) + "]",
        "kwargs": "[" + ",".join([kwargs for _, kwargs in arguments]) + "]",
    }


def limit_params(spec: JobSpec) -> Params:
    """One job's concurrency and rate limits."""
    return {
        "limit_groups": list(spec.limit_groups) if spec.limit_groups is not None else None,
        "limit_key": spec.limit_key,
    }


def jobs_columns(specs: Sequence[JobSpec], *, keys: bool) -> Params:
    """A batch's columns; with ``keys``, their idempotency keys too."""
    columns: dict[str, Any] = {
        "task_name": [spec.task_name for spec in specs],
        "queue": [spec.queue for spec in specs],
        "priority": [spec.priority for spec in specs],
        "args": "[" + ",".join([spec.args_json for spec in specs]) + "]",
        "kwargs": "[" + ",".join([spec.kwargs_json for spec in specs]) + "]",
        "max_attempts": [spec.max_attempts for spec in specs],
        "run_at": [spec.run_at for spec in specs],
        "delay": [spec.delay_seconds for spec in specs],
        # One JSON array of the jobs' meta, or NULL when none has any (the common case).
        "meta": meta_array(specs),
    }
    if keys:
        columns["idempotency_key"] = [spec.idempotency_key for spec in specs]
    return columns


def limit_columns(specs: Sequence[JobSpec]) -> Params:
    """A batch's limits: a JSON array with an array of names or null per
    job (NULL when no job has any), and their concurrency keys."""
    limited = any(spec.limit_groups is not None for spec in specs)
    return {
        "limit_groups": (
            json.dumps([list(spec.limit_groups) if spec.limit_groups else None for spec in specs])
            if limited
            else None
        ),
        "limit_key": [spec.limit_key for spec in specs],
    }


def meta_array(specs: Sequence[JobSpec]) -> str | None:
    """The specs' meta as one JSON array text, or None when no spec has meta."""
    if all(spec.meta_json is None for spec in specs):
        return None
    return "[" + ",".join([spec.meta_json or "{}" for spec in specs]) + "]"


#: COPY's text format gives these characters a meaning of their own: escaped in a field.
_COPY_SPECIAL = re.compile(r"[\\\t\n\r]")
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_field(text: str) -> str:
    """A text as a field of COPY's text format."""
    if _COPY_SPECIAL.search(text) is None:
        return text
    return text.translate(_COPY_ESCAPES)


#: Rows per piece of a COPY's data: the server parses one piece while the next is built.
COPY_CHUNK_ROWS = 200


def copy_text(ids: Sequence[int], specs: Sequence[JobSpec]) -> str:
    """The rows of ``copy_jobs`` for these ids and specs, as one text."""
    return "".join(copy_chunks(ids, specs))


def copy_chunks(
    ids: Sequence[int], specs: Sequence[JobSpec], rows: int = COPY_CHUNK_ROWS
) -> Iterator[str]:
    """The rows of ``copy_jobs`` (COPY's text format, its column order) for plain specs
    without a key, limits or a time to run at: one line per job, ``ids[i]`` its id, in
    pieces of ``rows`` lines (sent as they are built).

    Most batches repeat a few tasks: the fields every job of a task shares are escaped
    once per batch.
    """
    shared: dict[tuple[str, str, int, int], str] = {}
    lines: list[str] = []
    last: JobSpec | None = None
    tail = ""
    for job_id, spec in zip(ids, specs, strict=True):
        if (
            last is None
            or spec.task_name is not last.task_name
            or spec.queue is not last.queue
            or spec.priority != last.priority
            or spec.max_attempts != last.max_attempts
        ):
            key = (spec.task_name, spec.queue, spec.priority, spec.max_attempts)
            found = shared.get(key)
            if found is None:
                found = shared[key] = (
                    f"{_copy_field(spec.task_name)}\t{_copy_field(spec.queue)}"
                    f"\t{spec.priority:d}\t{spec.max_attempts:d}"
                )
            tail, last = found, spec
        args, kwargs, meta = spec.args_json, spec.kwargs_json, spec.meta_json
        lines.append(
            f"{job_id:d}\t{args if args == '[]' else _copy_field(args)}"
            f"\t{kwargs if kwargs == '{}' else _copy_field(kwargs)}"
            f"\t{'{}' if meta is None else _copy_field(meta)}\t{tail}\n"
        )
        if len(lines) == rows:
            yield "".join(lines)
            lines = []
    if lines:
        yield "".join(lines)
