"""What the dashboard's job page reads: one job, its documents (args, kwargs, result,
meta) cut on the server, and for a workflow step its neighbours in the workflow; on the
dashboard's own connections (:class:`~pgtasks.web.reads.DashboardDatabase`).
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from typing import Any

import psycopg

from .._durable_text import parked_detail, parked_state, step_rows
from .._errors import JobNotFoundError
from .._jobs import JobRow
from .._limits import SEPARATOR
from .._payload import decode_stored
from .._progress import Progress
from .job_logs import AttemptLines, attempt_lines
from .reads import DashboardDatabase

#: A job page shows each JSON document (args, kwargs, result, meta) and the last error up
#: to this many characters (an error longer than that as its head and its tail).
PAGE_JSON_CHARS = 65_536
PAGE_ERROR_CHARS = 65_536


@dataclasses.dataclass(frozen=True)
class Document:
    """A JSON document of a job as its page shows it: ``text`` is the whole document
    pretty-printed, or (``cut``) the head of its compact text; ``length`` in characters."""

    text: str
    length: int
    cut: bool

    @classmethod
    def from_text(cls, text: str | None, length: int | None, limit: int) -> tuple[Any, Document]:
        """The parsed value (None when cut or absent) and how to show it."""
        if text is None:
            return None, cls("null", 4, False)
        full_length = int(length if length is not None else len(text))
        if full_length > limit:
            return None, cls(text, full_length, True)
        try:
            value = decode_stored(text)
        except ValueError:  # an integer of more digits than Python converts, nested too deep
            return None, cls(text, full_length, False)
        pretty = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
        return value, cls(pretty, full_length, False)


@dataclasses.dataclass(frozen=True)
class Neighbour:
    """A step a workflow step's page links to: before it, or after it."""

    id: int
    step: str | None
    task_name: str
    status: str


#: Predecessors and successors a job page names at most (a chord's callback may have
#: thousands: the workflow's page draws them all).
NEIGHBOURS = 20
#: Limit instances a job page reads at most (pgtasks writes at most 3; a claim takes a
#: job under at most 8; a row written by hand may hold any number).
LIMIT_INSTANCES = 20
#: The durable steps a job page lists at most.
STEPS_SHOWN = 200
#: The most limit instances a claim takes a job under.
CLAIMED_INSTANCES = 8


@dataclasses.dataclass(frozen=True)
class JobPage:
    """One job as its page shows it: the row (documents that were cut read as empty),
    each document's display, and what the job row says beyond JobRow."""

    now: datetime
    job: JobRow
    documents: dict[str, Document]
    cancel_requested: bool
    limit_groups: list[str] | None
    limit_key: str | None
    workflow_id: int | None
    workflow_step: str | None
    #: A workflow step's predecessors and successors (the first NEIGHBOURS of each) and
    #: how many it has.
    previous: list[Neighbour] = dataclasses.field(default_factory=list)
    following: list[Neighbour] = dataclasses.field(default_factory=list)
    previous_count: int = 0
    following_count: int = 0
    #: How many limit instances the job carries (``limit_groups`` holds the first
    #: LIMIT_INSTANCES of them).
    limit_groups_count: int = 0
    #: A durable job's steps (the first STEPS_SHOWN), every value escaped and capped.
    steps: list[dict[str, str]] = dataclasses.field(default_factory=list)
    steps_count: int = 0
    #: The captured log lines, per attempt (newest attempt first).
    logs: list[AttemptLines] = dataclasses.field(default_factory=list)

    @property
    def parked(self) -> str | None:
        """ "sleeping", "waiting" or "snoozed": a pending job parked by a durable call."""
        return parked_state(self.job.status.value, self.job.meta)

    @property
    def parked_detail(self) -> str:
        return parked_detail(self.job.meta)

    @property
    def progress(self) -> Progress | None:
        return self.job.progress

    @property
    def limit_names(self) -> list[str]:
        """The limits that apply (``queue:…``, ``task:…``, ``key:…``), without the key
        a per-key limit's instance carries (``limit_key`` says it)."""
        names = [group.split(SEPARATOR, 1)[0] for group in self.limit_groups or () if group]
        return list(dict.fromkeys(names))

    @property
    def unread_limit_groups(self) -> int:
        """Limit instances of the job its page does not show (past LIMIT_INSTANCES)."""
        return max(0, self.limit_groups_count - len(self.limit_groups or ()))

    @property
    def over_claimed_instances(self) -> bool:
        """More limit instances than a claim takes: no worker claims the job."""
        return self.limit_groups_count > CLAIMED_INSTANCES

    @property
    def unique_period(self) -> float | None:
        """Seconds of a ``unique_for=`` job's window (None: no window, or unbounded)."""
        start, end = self.job.unique_window_start, self.job.unique_window_end
        if start is None or end is None:
            return None
        return (end - start).total_seconds()


def job_page(database: DashboardDatabase, job_id: int) -> JobPage:
    """One job's page; JobNotFoundError when it does not exist."""

    steps: list[dict[str, Any]] = []

    def read(conn: psycopg.Connection[Any]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        store = database.queries
        steps[:] = store.get_job_steps(conn, job_id)
        row = store.get_job_page(
            conn,
            job_id,
            json_chars=PAGE_JSON_CHARS,
            error_chars=PAGE_ERROR_CHARS,
            neighbours=NEIGHBOURS,
            instances=LIMIT_INSTANCES,
        )
        if row is None or row["workflow_id"] is None:
            return row, []
        linked = _ids(row["prev_ids"]) + _ids(row["next_ids"])
        if not linked:
            return row, []
        return row, store.get_workflow_neighbours(conn, row["workflow_id"], linked)

    row, linked = database.run(read)
    if row is None:
        raise JobNotFoundError(f"job {job_id} does not exist (it may have been pruned)")
    neighbours = {
        item["id"]: Neighbour(item["id"], item["workflow_step"], item["task_name"], item["status"])
        for item in linked
    }
    values = dict(row)
    documents = {}
    for name, empty in (("args", []), ("kwargs", {}), ("result", None), ("meta", {})):
        value, document = Document.from_text(
            row[f"{name}_text"], row[f"{name}_length"], PAGE_JSON_CHARS
        )
        values[name] = empty if value is None and document.text != "null" else value
        documents[name] = document
    if not isinstance(values["meta"], dict):
        values["meta"] = {}
    return JobPage(
        now=row["now"],
        job=JobRow.from_row(values),
        documents=documents,
        cancel_requested=bool(row["cancel_requested"]),
        limit_groups=row["limit_groups"],
        limit_key=row["limit_key"],
        workflow_id=row["workflow_id"],
        workflow_step=row["workflow_step"],
        previous=[neighbours[i] for i in _ids(row["prev_ids"]) if i in neighbours],
        following=[neighbours[i] for i in _ids(row["next_ids"]) if i in neighbours],
        previous_count=int(row["prev_count"] or 0),
        following_count=int(row["next_count"] or 0),
        limit_groups_count=int(row["limit_groups_count"] or 0),
        steps=step_rows(steps[:STEPS_SHOWN]),
        steps_count=len(steps),
        logs=attempt_lines(row["logs"]),
    )


def _ids(values: list[Any] | None) -> list[int]:
    """The ids of a links array (a hand-edited row may hold NULLs or repeat an id)."""
    return list(dict.fromkeys(value for value in values or () if isinstance(value, int)))
