"""What the dashboard reads from a request (its base path, ids, filters, the message of
an action's redirect) and the query strings of its links."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from urllib.parse import urlencode

from starlette.exceptions import HTTPException
from starlette.requests import Request

from .._job_filter import JobFilter, parse_job_filter
from .._jobs import JobRow
from .._operations import STATUSES

#: The largest id PostgreSQL's bigint holds: larger ids are "not found", not a 500.
MAX_ID = 2**63 - 1
#: Its digits: a longer number is too large without being converted (Python refuses to
#: convert a string of more than 4,300 digits: a ValueError, a 500).
MAX_ID_DIGITS = len(str(MAX_ID))
#: What an action's redirect reports (``?done=...``): fixed texts, never request input.
MESSAGES = {
    "retried": "Retried: the job is pending and due now.",
    "cancelled": "Cancelled: the job will not run.",
    "requested": "Cancellation requested: its worker stops it and records it as cancelled.",
    "finished": "The job had already finished: nothing to cancel.",
    "terminate-requested": (
        "Termination requested: a process job's worker child is killed and replaced, an async"
        " job's task cancelled; a thread cannot be killed: a thread job only gets the cancel"
        " flag and stops when its code checks it. It ends cancelled."
    ),
    "deleted": "The job was deleted.",
    "bulk-retried": "Retried {count} job(s).",
    "bulk-cancelled": "Cancelled {count} pending job(s), asked {requested} running job(s) to stop.",
    "selected-retried": "Retried {count} selected job(s); {refused} could not be retried.",
    "selected-cancelled": (
        "Cancelled {count} selected job(s), asked {requested} running job(s) to stop;"
        " {refused} had already finished."
    ),
    "selected-deleted": "Deleted {count} selected job(s); {refused} could not be deleted.",
    "paused": "Paused: workers claim none of its jobs from their next poll on.",
    "resumed": "Resumed: its workers were woken.",
    "host-paused": "Paused: the host's workers claim no job from their next read on (about a"
    " second); their running jobs finish.",
    "host-resumed": "Resumed: the host's workers claim again.",
    "workflow-cancelled": (
        "Cancelled the workflow: {count} job(s) cancelled or asked to stop (running ones end"
        " cancelled when their workers stop them)."
    ),
    "limit-set": "Limit changed: every worker applies it from its next claim.",
    "limit-pause": "Limit paused: no job under it starts until it is resumed.",
    "limit-resume": "Limit resumed.",
    "limit-reset": "Limit reset: what the app declares applies again.",
    "run-now": "The job is due now.",
    "snooze": "Snoozed: the job starts later (no attempt spent).",
    "edited": "Arguments saved: the job runs with them.",
    "selected-run-now": "Made {count} selected job(s) due now; {refused} were not pending later.",
    "selected-snooze": "Snoozed {count} selected job(s); {refused} were not pending.",
    "selected-edit": (
        "Arguments saved on {count} selected job(s); {refused} were not pending (started"
        " meanwhile, or finished): left as they were."
    ),
    "bulk-run-now": "Made {count} pending job(s) scheduled later due now.",
    "pool-resized": (
        "Pool size asked: the worker applies it at its next heartbeat (Busy shows its size)."
    ),
}
#: Which job statuses a page about the jobs list links to, in life-cycle order.
TAB_STATUSES = STATUSES


def query_string(params: Mapping[str, object]) -> str:
    """A query string of the non-empty values, in order (for links and event streams)."""
    return urlencode({name: value for name, value in params.items() if value not in (None, "")})


def base_path(request: Request) -> str:
    """The path the dashboard is mounted at ("" at the root)."""
    return str(request.scope.get("root_path", ""))


def route_path(request: Request) -> str:
    path = str(request.scope.get("path", "/"))
    base = base_path(request)
    return (path[len(base) :] if base and path.startswith(base) else path) or "/"


def live_url(request: Request, page: str, query: str = "") -> str:
    url = f"{base_path(request)}/events{'' if page == '/' else page}"
    return f"{url}?{query}" if query else url


def filter_or_400(params: Mapping[str, str]) -> JobFilter:
    try:
        return parse_job_filter(params)
    except ValueError as error:
        raise HTTPException(400, f"bad filter: {error}") from None


def tab_links(job_filter: JobFilter) -> dict[str, str]:
    """The query string of each status tab: the filter with that status (and no paging)."""
    query = job_filter.as_query()
    query.pop("status", None)
    links = {"": query_string(query)}
    for status in TAB_STATUSES:
        links[status] = query_string({**query, "status": status})
    return links


def optional_id(text: str | None, name: str) -> int | None:
    if text is None or text == "":
        return None
    if not is_id(text):
        raise HTTPException(400, f"{name} must be a job id (a positive integer), got {text[:40]!r}")
    return int(text)


def form_id(text: str) -> int:
    job_id = optional_id(text, "id")
    if job_id is None:
        raise HTTPException(400, "id must be a job id (a positive integer), got ''")
    return job_id


def is_id(text: str) -> bool:
    """An id PostgreSQL's bigint holds, in ASCII digits."""
    return text.isascii() and text.isdigit() and len(text) <= MAX_ID_DIGITS and int(text) <= MAX_ID


def id_or_404(text: str) -> int:
    if not is_id(text):
        raise HTTPException(404, f"no job {text[:40]!r}: job ids are positive integers")
    return int(text)


def path_id(request: Request) -> int:
    return id_or_404(request.path_params["job_id"])


def workflow_id_or_404(text: str) -> int:
    if not is_id(text):
        raise HTTPException(404, f"no workflow {text[:40]!r}: workflow ids are positive integers")
    return int(text)


def message(request: Request) -> str | None:
    done = request.query_params.get("done")
    template = MESSAGES.get(done or "")
    if template is None:
        return None

    def number(name: str) -> int:
        text = request.query_params.get(name, "0")
        return int(text) if text.isascii() and text.isdigit() and len(text) < 10 else 0

    return template.format(
        count=number("count"), requested=number("requested"), refused=number("refused")
    )


def timeline(job: JobRow) -> list[tuple[str, datetime | None]]:
    return [
        ("created", job.created_at),
        ("run at", job.run_at),
        ("first started", job.started_at),
        ("started (locked at)", job.locked_at),
        ("finished", job.finished_at),
        ("updated", job.updated_at),
    ]
