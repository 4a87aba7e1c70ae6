"""JobFilter: which jobs a listing or a bulk action selects (the dashboard's jobs page, its
bulk actions, ``pgtasks`` operations), read from a query string and written back to one.

Pure module: no I/O, no database imports; the Store turns a JobFilter into SQL
(pgtasks/_store/web.py).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ._operations import STATUSES

#: Query-string names of a JobFilter's fields, in the order the jobs page shows them.
FILTER_FIELDS = ("status", "queue", "task", "args", "log", "from", "to", "due", "workflow")
#: What the ``due`` filter accepts: pending and due now (yes), or scheduled later (no).
DUE_VALUES = {"yes": True, "no": False}
#: The largest value of PostgreSQL's bigint (ids beyond it are refused, not a 500).
MAX_BIGINT = 2**63 - 1


@dataclasses.dataclass(frozen=True)
class JobFilter:
    """Which jobs a listing or a bulk action selects; None fields match anything.

    ``args``: a JSON value the job's args contain (jsonb ``@>``), e.g. ``[42]`` or
    ``[{"user": 7}]``; ``created_from`` / ``created_to``: a half-open range of created_at;
    ``due``: pending jobs due now (True) or scheduled for later (False); ``workflow_id``:
    the jobs of one workflow; ``log``: text one of the job's captured log lines holds
    (case-insensitive; meta "pgtasks.logs").
    """

    status: str | None = None
    queue: str | None = None
    task_name: str | None = None
    args: Any = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    due: bool | None = None
    workflow_id: int | None = None
    log: str | None = None

    @property
    def log_pattern(self) -> str | None:
        """``log`` as an ILIKE pattern over the lines' JSON text (its JSON escapes, and
        ``%``, ``_`` and ``\\`` taken literally)."""
        if self.log is None:
            return None
        escaped = json.dumps(self.log, ensure_ascii=False)[1:-1]
        for special in ("\\", "%", "_"):
            escaped = escaped.replace(special, "\\" + special)
        return f"%{escaped}%"

    @property
    def empty(self) -> bool:
        return self == JobFilter()

    def as_query(self) -> dict[str, str]:
        """The query-string form ``parse_job_filter`` reads back (empty fields left out)."""
        values = {
            "status": self.status,
            "queue": self.queue,
            "task": self.task_name,
            "args": None if self.args is None else json.dumps(self.args, ensure_ascii=False),
            "log": self.log,
            "from": None if self.created_from is None else self.created_from.isoformat(),
            "to": None if self.created_to is None else self.created_to.isoformat(),
            "due": None if self.due is None else ("yes" if self.due else "no"),
            "workflow": None if self.workflow_id is None else str(self.workflow_id),
        }
        return {name: value for name, value in values.items() if value is not None}

    @property
    def scans(self) -> bool:
        """Whether listing it reads jobs no index selects: a filter on args, task,
        creation time, due, or a queue (except with a status a partial index serves).
        A workflow's jobs are read through jobs_workflow_idx, whatever else is filtered."""
        if self.workflow_id is not None:
            return False
        if self.args is not None or self.task_name is not None or self.due is not None:
            return True
        if self.log is not None:
            return True
        if self.created_from is not None or self.created_to is not None:
            return True
        return self.queue is not None and self.status not in ("waiting", "pending", "running")

    @property
    def counted_by_status(self) -> bool:
        """Whether status counts describe it: it selects at most a queue (and a status)."""
        return dataclasses.replace(self, queue=None, status=None) == JobFilter()


def _filter_time(name: str, text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{name}: {text!r} is not a date and time (use ISO 8601, e.g. 2024-05-01T12:00)"
        ) from None
    # A browser's datetime-local field sends no offset: the dashboard shows UTC.
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def _encodable(text: str) -> bool:
    """UTF-8 can encode it (no lone surrogate such as ``\\ud800`` from a JSON escape)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _jsonb_storable(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return "\x00" not in value and _encodable(value)
    if isinstance(value, list):
        return all(_jsonb_storable(item) for item in value)
    if isinstance(value, dict):
        return all(_jsonb_storable(key) and _jsonb_storable(item) for key, item in value.items())
    return True


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_job_filter(params: Mapping[str, str]) -> JobFilter:
    """A JobFilter from query-string values (blank ones ignored); ValueError names the
    field and what it accepts.
    """

    def get(name: str) -> str | None:
        value = params.get(name, "").strip()
        if "\x00" in value:
            raise ValueError(f"{name}: NUL characters are not allowed")
        if not _encodable(value):
            raise ValueError(f"{name}: {value!r} is not valid text (a lone surrogate)")
        return value or None

    status = get("status")
    if status is not None and status not in STATUSES:
        raise ValueError(f"status: {status!r} is not one of {', '.join(STATUSES)}")
    args_text = get("args")
    args: Any = None
    if args_text is not None:
        try:
            args = json.loads(args_text, parse_constant=_no_constant)
        except (ValueError, RecursionError):  # RecursionError: nested too deep
            raise ValueError(
                f'args: {args_text!r} is not JSON (e.g. [42], ["a@example.com"] or'
                ' [{"user": 7}]: jobs whose args contain it)'
            ) from None
        if not _jsonb_storable(args):
            # Out-of-range numbers (1e400), NUL characters and lone surrogates ("\ud800"):
            # PostgreSQL's jsonb has none of them.
            raise ValueError(f"args: {args_text!r} holds a value jsonb cannot store")
    created_from = get("from")
    created_to = get("to")
    due_text = get("due")
    if due_text is not None and due_text not in DUE_VALUES:
        raise ValueError(f"due: {due_text!r} is not one of {', '.join(DUE_VALUES)}")
    workflow_text = get("workflow")
    if workflow_text is not None and not (
        workflow_text.isascii()
        and workflow_text.isdigit()
        and len(workflow_text) <= len(str(MAX_BIGINT))
        and int(workflow_text) <= MAX_BIGINT
    ):
        raise ValueError(
            f"workflow: {workflow_text[:40]!r} is not a workflow id (a positive integer; see"
            " the workflows list)"
        )
    job_filter = JobFilter(
        status=status,
        queue=get("queue"),
        task_name=get("task"),
        args=args,
        created_from=None if created_from is None else _filter_time("from", created_from),
        created_to=None if created_to is None else _filter_time("to", created_to),
        due=None if due_text is None else DUE_VALUES[due_text],
        workflow_id=None if workflow_text is None else int(workflow_text),
        log=get("log"),
    )
    if (
        job_filter.created_from is not None
        and job_filter.created_to is not None
        and job_filter.created_from >= job_filter.created_to
    ):
        raise ValueError("from must be earlier than to")
    return job_filter
