"""Claimed rows made ClaimedJobs (``claims.py`` runs the claims): a claim's rows, one
per job, through a psycopg row factory, or a batched claim's row of arrays
(``base.BATCHED_CLAIMS``); each job's payloads decoded alone, so one that cannot be
decoded fails its own job, never the reply that carries the others.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

from psycopg.rows import RowFactory

from .._leases import CLAIMED_JOB_FIELDS, ClaimedJob
from .._payload import MAX_DECODE_DEPTH, decode_stored
from .base import BATCHED_COLUMNS

#: ClaimedJob's fields by the claim's column names (``attempts`` is the attempt).
_CLAIM_FIELDS = {"attempts": "attempt"}
#: ClaimedJob's field of each column of a batched claim (base.BATCHED_COLUMNS).
_BATCHED_FIELDS = tuple(_CLAIM_FIELDS.get(name, name) for name, _ in BATCHED_COLUMNS)
#: Payload texts that need no decoding.
_EMPTY: dict[str, type[Any]] = {"[]": list, "{}": dict}


def claimed_jobs(worker_id: int) -> RowFactory[ClaimedJob]:
    """A psycopg row factory that makes claimed rows ClaimedJobs of lease owner
    ``worker_id`` straight from their values (no dict per row, nor the frozen
    dataclass's ``__init__``, which sets each field through ``object.__setattr__``)."""

    def factory(cursor: Any) -> Callable[[Sequence[Any]], ClaimedJob]:
        return _job_maker(_columns(cursor), worker_id)

    return factory


def claimed_or_handed(worker_id: int) -> RowFactory[tuple[ClaimedJob, bool]]:
    """``claimed_jobs`` for a claim that also returns the jobs its round trip's finish
    handed over (the ``_handing`` claims): each row's job, and its last column (true: a
    handed job, false: a claimed one)."""

    def factory(cursor: Any) -> Callable[[Sequence[Any]], tuple[ClaimedJob, bool]]:
        make = _job_maker(_columns(cursor)[:-1], worker_id)

        def row(values: Sequence[Any]) -> tuple[ClaimedJob, bool]:
            return make(values[:-1]), bool(values[-1])

        return row

    return factory


def batched_jobs(row: Sequence[Any] | None, worker_id: int) -> list[ClaimedJob]:
    """The ClaimedJobs of a ``_batched`` claim's row (an array per column, NULLs when it
    took none), each one's payloads decoded as a claim's rows are: one that cannot be
    decoded fails its own job, never the batch."""
    if row is None or row[0] is None:
        return []
    new, jobs = object.__new__, []
    constant = {"worker_id": worker_id, "limited": False, "undecodable": None}
    for values in zip(*row, strict=True):
        job: ClaimedJob = new(ClaimedJob)
        fields = job.__dict__
        fields.update(zip(_BATCHED_FIELDS, values, strict=True))
        fields.update(constant)
        _decode_payloads(fields)
        jobs.append(job)
    return jobs


def _columns(cursor: Any) -> tuple[bytes | None, ...]:
    result = cursor.pgresult
    if result is None:
        return ()
    return tuple(result.fname(index) for index in range(result.nfields))


def _job_maker(
    columns: tuple[bytes | None, ...], worker_id: int
) -> Callable[[Sequence[Any]], ClaimedJob]:
    names, has_limited = _claim_names(columns)
    # The plain claims return no ``limited`` column: their jobs are not limited.
    constant = (
        {"worker_id": worker_id, "undecodable": None}
        if has_limited
        else {"worker_id": worker_id, "limited": False, "undecodable": None}
    )
    new = object.__new__

    def make(values: Sequence[Any]) -> ClaimedJob:
        job: ClaimedJob = new(ClaimedJob)
        fields = job.__dict__
        fields.update(zip(names, values, strict=True))
        fields.update(constant)
        # Payloads other than [] and {} came as text: decoded here, one job at a time.
        if str in (type(fields["args"]), type(fields["kwargs"]), type(fields["meta"])):
            _decode_payloads(fields)
        return job

    return make


#: The claim's payload columns, what each must hold, and what a job that cannot
#: decode one says.
_PAYLOADS = (("args", list, "arguments"), ("kwargs", dict, "arguments"), ("meta", dict, "meta"))


def _decode_payloads(fields: dict[str, Any]) -> None:
    """Decode a claimed job's args, kwargs and meta (JSON texts) in place. One that cannot
    be decoded (nested past MAX_DECODE_DEPTH, not JSON) raises nothing: the job gets
    empty payloads and ``undecodable`` says why, and its worker fails it without running
    it. (A limited claim's report row has NULL args and kwargs.)"""
    for name, kind, what in _PAYLOADS:
        text = fields[name]
        if type(text) is not str:  # decoded already ([] or {}), or NULL
            continue
        if text in _EMPTY:  # a batched claim's [] or {}: a new one
            fields[name] = _EMPTY[text]()
            continue
        try:
            # Fewer brackets than the bound: it cannot nest deeper (most payloads).
            if text.count("[") + text.count("{") <= MAX_DECODE_DEPTH:
                fields[name] = _decode(text)
            else:
                fields[name] = decode_stored(text)
        except Exception:  # any error: this job's, never the reply's
            fields[name] = kind()
            if fields["undecodable"] is None:
                fields["undecodable"] = f"cannot decode its {what}: {name} is {_why(text)}"


def _why(text: str) -> str:
    """Why ``text`` cannot be decoded, in decode_stored's words."""
    try:
        decode_stored(text)
    except Exception as error:
        return str(error)
    return "not decodable here"


_decode = json.JSONDecoder().decode


@functools.lru_cache(maxsize=64)
def _claim_names(columns: tuple[bytes | None, ...]) -> tuple[tuple[str, ...], bool]:
    """ClaimedJob's field of each column a claim returned (checked once per shape of
    result, not per round trip: reading ``cursor.description`` makes a Column per
    column), and whether a ``limited`` column is among them."""
    names = tuple(
        _CLAIM_FIELDS.get(name, name)
        for name in (column.decode() if column is not None else "" for column in columns)
    )
    missing = CLAIMED_JOB_FIELDS.difference(names, ("worker_id", "limited", "undecodable"))
    if missing:
        raise RuntimeError(f"the claim returned no {', '.join(sorted(missing))} column")
    return names, "limited" in names
