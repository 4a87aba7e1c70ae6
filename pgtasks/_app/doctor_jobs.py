"""``pgtasks doctor``'s checks of job rows: jobs no worker knows the task of, jobs of
tasks registered in a script run as ``__main__``, payloads nested past the bound."""

from __future__ import annotations

from collections.abc import Sequence

from .._payload import MAX_DECODE_DEPTH, MAX_JSON_DEPTH
from .._text import printable
from .findings import Finding, Row

#: How many of jobs_history's newest rows the deep payloads check reads (a bounded check:
#: the table keeps every finished job for its retention).
DEEP_HISTORY_SCAN = 100_000


def check_unknown_tasks(rows: Sequence[Row]) -> Finding:
    if not rows:
        return Finding(
            "unknown tasks", "ok", "every pending job's task is known to a live worker of its queue"
        )
    total = sum(int(row["jobs"]) for row in rows)
    shown = "; ".join(
        f"{row['jobs']} job(s) of task `{printable(row['task_name'])}` in queue"
        f" {printable(row['queue'])}"
        for row in rows[:5]
    )
    return Finding(
        "unknown tasks",
        "warning",
        f"{total} pending job(s) no live worker knows: {shown}",
        "deploy workers whose app registers these tasks (for those queues); until then the"
        " jobs wait, untouched. A typo in send_task's name? Cancel them (pgtasks jobs cancel)",
    )


def check_main_module_tasks(rows: Sequence[Row]) -> Finding:
    """Unfinished jobs of tasks named ``__main__.…``: registered by a module run as a
    script, which a worker (importing the module by its name) never knows."""
    if not rows:
        return Finding("__main__ tasks", "ok", "no unfinished job names a task of __main__")
    total = sum(int(row["jobs"]) for row in rows)
    shown = "; ".join(
        f"{row['jobs']} job(s) of task `{printable(row['task_name'])}` in queue"
        f" {printable(row['queue'])} (the first: job {row['first_id']})"
        for row in rows[:5]
    )
    return Finding(
        "__main__ tasks",
        "warning",
        f"{total} unfinished job(s) of tasks registered in a script run as __main__, which no"
        f" worker knows (it imports the module under its own name): {shown}",
        "define tasks in an importable module (or give them name=...), enqueue again, and"
        " cancel these (pgtasks jobs cancel ID)",
    )


def check_deep_payloads(rows: Sequence[Row]) -> Finding:
    """Jobs whose args, kwargs, meta or result nest past MAX_JSON_DEPTH (rows written by
    SQL or another tool); those past MAX_DECODE_DEPTH fail without running."""
    if not rows:
        return Finding(
            "deep payloads",
            "ok",
            f"no job's payload nests more than {MAX_JSON_DEPTH} levels deep",
        )
    total = int(rows[0]["total"])
    undecodable = any(row["undecodable"] for row in rows)
    shown = "; ".join(
        f"job {row['id']} (task `{printable(row['task_name'])}`, queue"
        f" {printable(row['queue'])}, {row['status']}: {', '.join(row['columns'])}"
        f"{', past ' + str(MAX_DECODE_DEPTH) if row['undecodable'] else ''})"
        for row in rows[:5]
    )
    return Finding(
        "deep payloads",
        "critical" if undecodable else "warning",
        f"{total} job(s) hold JSON nested more than {MAX_JSON_DEPTH} levels deep (pgtasks"
        f" refuses such values; a worker fails a job whose payload nests past"
        f" {MAX_DECODE_DEPTH} without running it): {shown}",
        "rows written by SQL or another tool: fix the writer, then delete or cancel these"
        " jobs (pgtasks jobs cancel ID / pgtasks jobs delete ID)",
    )


def check_deep_history_payloads(rows: Sequence[Row], scan: int) -> Finding:
    """Finished jobs in jobs_history (its newest ``scan`` rows: the check is bounded) whose
    args, kwargs, meta or result nest past MAX_JSON_DEPTH: their results cannot be read
    back, and a retry of one past MAX_DECODE_DEPTH fails without running."""
    if not rows:
        return Finding(
            "deep payloads (jobs_history)",
            "ok",
            f"no payload of the newest {scan:,} finished jobs (jobs_history) nests more than"
            f" {MAX_JSON_DEPTH} levels deep",
        )
    total = int(rows[0]["total"])
    scanned = int(rows[0]["scanned"])
    shown = "; ".join(
        f"job {row['id']} (task `{printable(row['task_name'])}`, queue"
        f" {printable(row['queue'])}, {row['status']}: {', '.join(row['columns'])}"
        f"{', past ' + str(MAX_DECODE_DEPTH) if row['undecodable'] else ''})"
        for row in rows[:5]
    )
    return Finding(
        "deep payloads (jobs_history)",
        "warning",
        f"{total} of the newest {scanned:,} finished jobs (jobs_history; older rows are not"
        f" checked) hold JSON nested more than {MAX_JSON_DEPTH} levels deep (pgtasks refuses"
        f" such values: their results cannot be read back, and a retried job whose payload"
        f" nests past {MAX_DECODE_DEPTH} fails without running): {shown}",
        "rows written by SQL or another tool: fix the writer, then delete these jobs"
        " (pgtasks jobs delete ID) rather than retrying them",
    )


def check_held_sequences(rows: Sequence[Row]) -> Finding:
    """Sequences held by a failed job (``sequence_on_failure="hold"``):
    their next jobs wait until it is retried and done, or the sequence is released."""
    if not rows:
        return Finding("sequences", "ok", "no sequence is held by a failed job")
    shown = "; ".join(
        f"sequence {printable(row['key'])!r} is held by failed job {row['job_id']}"
        for row in rows[:5]
    )
    return Finding(
        "sequences",
        "warning",
        f"{len(rows)} sequence(s) run nothing until their failed job is dealt with: {shown}",
        "retry the failed job (pgtasks jobs retry ID: the sequence goes on once it is done),"
        " or release the sequence (pgtasks sequences release KEY: its next job starts)",
    )
