"""ClaimQueries: claims and finishes (``sql/claims.sql``), and the round trip that runs
both at once.

The worker hands over records (``pgtasks._leases``): a ClaimRequest becomes the claim
statement's parameters, Finishes the finish statement's, and claimed rows come back as
ClaimedJobs made straight from their values.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import RowFactory, tuple_row

from .._leases import (
    CLAIMED_JOB_FIELDS,
    ClaimedJob,
    ClaimRequest,
    Finish,
    LimitedClaimReport,
    RoundTrip,
    claim_order,
)
from .._payload import MAX_DECODE_DEPTH, decode_stored
from .base import JsonbUndecodedLoader, QueriesBase, own_transaction, translate_errors

#: ClaimedJob's fields by the claim's column names (``attempts`` is the attempt).
_CLAIM_FIELDS = {"attempts": "attempt"}


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


def claim_statement(claim: ClaimRequest) -> tuple[str, dict[str, Any]]:
    """The name and parameters of the claim a request asks for: the limited claim, the
    plain one, or the plain one from a position (``claim_jobs_after``)."""
    params: dict[str, Any] = {
        "worker_id": claim.worker_id,
        "queues": list(claim.queues) if claim.queues is not None else None,
        "excluded_queues": list(claim.excluded_queues) if claim.excluded_queues else None,
        "limit": claim.limit,
        "task_names": list(claim.task_names) if claim.task_names is not None else None,
    }
    aged = claim.aging is not None or bool(claim.queue_aging)
    if aged or claim.limited:
        # Priority aging (claim_jobs_aged): the intervals, app-wide and per queue.
        params["aging"] = claim.aging
        params["aged_queues"] = [queue for queue, _ in claim.queue_aging] or None
        params["aged_seconds"] = [seconds for _, seconds in claim.queue_aging] or None
    if claim.limited:
        return "claim_limited", params
    if aged:
        # Effective priorities, read per priority level.
        return "claim_jobs_aged", params
    after = claim.after
    if after is None:
        return "claim_jobs", params
    params["after_priority"] = after.priority
    params["after_run_at"] = after.run_at
    params["after_id"] = after.id
    return "claim_jobs_after", params


def split_report(rows: list[ClaimedJob]) -> tuple[list[ClaimedJob], LimitedClaimReport]:
    """The jobs claim_limited took, in claim order, and its report: its
    last row (id NULL) is no job, its meta holds what held jobs back (or the error that
    ended the claim)."""
    if rows and rows[-1].id is None:
        last = rows.pop()  # where claim_limited returns it
    else:
        # Wrapped (an announced claim), the rows may come in another order.
        found = [index for index, row in enumerate(rows) if row.id is None]
        if not found:
            return rows, LimitedClaimReport()
        last = rows.pop(found[0])
    return rows, LimitedClaimReport.from_values(last.meta)


def _trip(
    written: dict[int, str], claim: ClaimRequest | None, claimed: list[ClaimedJob]
) -> RoundTrip:
    """A round trip's record (``claimed`` in claim order already): a limited claim's jobs
    without its report row, which becomes ``report``."""
    if claim is not None and claim.limited:
        jobs, report = split_report(claimed)
        return RoundTrip(written, jobs, report)
    return RoundTrip(written, claimed)


def _sequence_taker(finishes: Sequence[Finish], claim: ClaimRequest | None) -> str | None:
    """The taker a round trip names (migration sequence_handover: JSON of the worker and
    its claim's filter), when it ends jobs of sequences and claims: the next job of each
    key goes to this worker running, in one write. None otherwise. (A handed job is a
    plain one: one that limits apply to goes pending, for the limited claim.)"""
    if claim is None:
        return None
    if not any(finish.sequence and finish.status != "pending" for finish in finishes):
        return None
    return json.dumps(
        {
            "worker": claim.worker_id,
            "queues": list(claim.queues) if claim.queues is not None else None,
            "excluded": list(claim.excluded_queues) if claim.excluded_queues else None,
            "tasks": list(claim.task_names) if claim.task_names is not None else None,
        }
    )


def _with_handed(trip: RoundTrip, cursor: psycopg.Cursor[ClaimedJob] | None) -> RoundTrip:
    """``trip`` with the jobs the finish handed over (``cursor``: their statement's)."""
    handed = cursor.fetchall() if cursor is not None else None
    return dataclasses.replace(trip, handed=handed) if handed else trip


def _split_handed(
    rows: list[tuple[ClaimedJob, bool]],
) -> tuple[list[ClaimedJob], list[ClaimedJob]]:
    """A _handing claim's rows: the jobs it claimed, and those the finish handed over."""
    return [job for job, handed in rows if not handed], [job for job, handed in rows if handed]


def _pinned_per_transaction(conn: psycopg.Connection[Any]) -> bool:
    """``conn`` goes through a transaction pooler (Database.pin_isolation set its
    isolation level) and runs each statement as a transaction of its own: a round trip
    that relies on READ COMMITTED begins its own transaction at that level."""
    return conn.isolation_level is not None and own_transaction(conn)


def _roll_back_failed_block(conn: psycopg.Connection[Any]) -> None:
    """A statement of a pinned round trip failed: the server skipped the rest (the COMMIT
    too), so the transaction it began is still open, aborted. End it; the connection stays
    usable (a broken one is replaced by its owner)."""
    if conn.closed or conn.broken:
        return
    if conn.pgconn.transaction_status != TransactionStatus.IDLE:
        with contextlib.suppress(psycopg.Error):
            conn.rollback()


def _job_id(finish: Finish) -> int:
    return finish.job_id


def finish_params(finishes: Sequence[Finish], taker: str | None = None) -> list[dict[str, Any]]:
    """finish_jobs' parameters (sent in binary), one set per lease owner: the numbers,
    statuses and the expected status as comma-joined text, result, error and exception
    type as arrays (texts of any content); the sequences' taker (``_sequence_taker``,
    '' for none).

    Each owner's finishes go in job id order, so the rows are locked in that order. The
    workflow steps a finish moves on are locked by the workflow triggers, in job id order
    too, whatever the order of the finishes.
    """
    by_owner: dict[int, list[Finish]] = {}
    for finish in finishes:
        by_owner.setdefault(finish.worker_id, []).append(finish)
    return [_owner_finish_params(owner, group, taker) for owner, group in by_owner.items()]


def _owner_finish_params(owner: int, finishes: list[Finish], taker: str | None) -> dict[str, Any]:
    finishes.sort(key=_job_id)
    return {
        "taker": taker or "",
        "worker_id": owner,
        "id": ",".join([str(finish.job_id) for finish in finishes]),
        "attempt": ",".join([str(finish.attempt) for finish in finishes]),
        "status": ",".join([finish.status for finish in finishes]),
        "result": [finish.result_json for finish in finishes],
        "error": [finish.error for finish in finishes],
        "delay": ",".join([repr(float(finish.delay)) for finish in finishes]),
        "held": ",".join(["running"] * len(finishes)),
        "exception_type": [finish.exception_type for finish in finishes],
    }


#: An attempt's log lines as update_job_logs writes them: job id, attempt, JSON.
AttemptLogs = tuple[int, int, str]


def logs_params(worker_id: int, logs: Sequence[AttemptLogs]) -> dict[str, Any]:
    return {
        "worker_id": worker_id,
        "id": [item[0] for item in logs],
        "attempt": [item[1] for item in logs],
        "logs": [item[2] for item in logs],
    }


def logged(finishes: Sequence[Finish]) -> dict[int, list[AttemptLogs]]:
    """The log lines the finishes carry, per lease owner (empty when no attempt logged:
    a round trip of attempts that did not log sends nothing more)."""
    by_owner: dict[int, list[AttemptLogs]] = {}
    for finish in finishes:
        if finish.logs_json is not None:
            item = (finish.job_id, finish.attempt, finish.logs_json)
            by_owner.setdefault(finish.worker_id, []).append(item)
    return by_owner


def _one_owner(finishes: Sequence[Finish]) -> bool:
    """The finishes are of one lease owner (one statement writes them)."""
    if not finishes:
        return False
    owner = finishes[0].worker_id
    return all(finish.worker_id == owner for finish in finishes)


class ClaimQueries(QueriesBase):
    """Claim jobs, write their attempts' ends (fenced), give leases back."""

    def claim_jobs(
        self, conn: psycopg.Connection[Any], claim: ClaimRequest, *, announced: bool = False
    ) -> list[ClaimedJob]:
        """Claim up to ``claim.limit`` due plain jobs from the start of claim order, in
        ``conn``'s transaction; ``announced``: notify the dashboard when it took any."""
        return self._claimed(conn, "claim_jobs", claim, announced=announced)

    def claim_jobs_after(
        self, conn: psycopg.Connection[Any], claim: ClaimRequest, *, announced: bool = False
    ) -> list[ClaimedJob]:
        """``claim_jobs`` reading on from ``claim.after``, the position of the last job a
        previous claim took (jobs of its priority sorting before it are not read)."""
        return self._claimed(conn, "claim_jobs_after", claim, announced=announced)

    def claim_jobs_aged(
        self, conn: psycopg.Connection[Any], claim: ClaimRequest, *, announced: bool = False
    ) -> list[ClaimedJob]:
        """``claim_jobs`` by effective priority (priority aging, ``claim.aging`` seconds a
        level)."""
        return self._claimed(conn, "claim_jobs_aged", claim, announced=announced)

    def claim_limited(
        self, conn: psycopg.Connection[Any], claim: ClaimRequest, *, announced: bool = False
    ) -> tuple[list[ClaimedJob], LimitedClaimReport]:
        """Claim up to ``claim.limit`` due jobs that limits apply to, never past a limit,
        in the order the claim took them; and what held jobs back, or the database error
        that ended the claim (it raises none for a row it cannot take: nothing is claimed
        then, and the report says why)."""
        return split_report(self._claimed(conn, "claim_limited", claim, announced=announced))

    def _claimed(
        self, conn: psycopg.Connection[Any], name: str, claim: ClaimRequest, *, announced: bool
    ) -> list[ClaimedJob]:
        """Run the claim statement ``name`` (``announced``: its variant that notifies the
        dashboard): the claimed jobs, in claim order (a limited claim's: as it took them,
        its report row last)."""
        _, params = claim_statement(claim)
        statement = self._statements[f"{name}_announced" if announced else name]
        with (
            translate_errors(self.schema),
            conn.cursor(row_factory=claimed_jobs(claim.worker_id)) as cursor,
        ):
            cursor.adapters.register_loader("jsonb", JsonbUndecodedLoader)
            cursor.execute(statement, params)
            claimed = cursor.fetchall()
        if not claim.limited:
            # UPDATE … RETURNING does not keep the CTE's order: restore the claim order.
            claimed.sort(key=claim_order)
        return claimed

    def finish_jobs(
        self, conn: psycopg.Connection[Any], finishes: Sequence[Finish]
    ) -> dict[int, str]:
        """Write ``finishes`` in ``conn``'s transaction, fenced (one with an error appends to
        the job's attempt history). Returns the status written per id whose write took
        effect (``cancelled`` when a cancellation was requested); the other ids had lost
        their lease."""
        written: dict[int, str] = {}
        for owner, logs in logged(finishes).items():  # first: the finish moves them along
            self.update_job_logs(conn, owner, logs)
        for params in finish_params(finishes):
            # finish_jobs returns (id, status, notifications sent).
            rows = self._rows(conn, "finish_jobs", params, binary=True, tuples=True)
            written.update((row[0], row[1]) for row in rows)
        return written

    def update_job_logs(
        self, conn: psycopg.Connection[Any], worker_id: int, logs: Sequence[AttemptLogs]
    ) -> None:
        """Write the log lines so far of running attempts, each fenced by its lease (a
        lost one writes nothing): the heartbeat's, and a finish's before it."""
        if logs:
            self._rows(conn, "update_job_logs", logs_params(worker_id, logs))

    def _send_logs(self, conn: psycopg.Connection[Any], finishes: Sequence[Finish]) -> None:
        """update_job_logs of the finishes that carry lines, sent in a pipeline."""
        for owner, logs in logged(finishes).items():
            statement = self._statements["update_job_logs"]
            conn.cursor().execute(statement, logs_params(owner, logs))

    def finish_and_claim_jobs(
        self,
        conn: psycopg.Connection[Any],
        finishes: Sequence[Finish],
        claim: ClaimRequest | None,
    ) -> RoundTrip:
        """``finish_jobs`` then the claim (None, or a limit of 0: none): one transaction,
        one network round trip (pipeline mode).

        A limited claim (some limit is stored) takes the jobs that limits
        apply to (claim_limited) in this round trip; when those do
        not fill its limit, a second round trip claims plain jobs for the rest. Claimed
        jobs come limited first (in the order the limited claim took them), then plain
        ones in claim order. What held limited jobs back, or the error that ended the
        limited claim (it never raises one: the plain claim goes on), is the round trip's
        ``report``. The second round trip is a transaction of its own: when the server
        refuses it (the connection still usable), the first one's finishes and claims
        stand and are returned, its error in ``report.plain_error`` (the plain claim is
        tried again next time).

        A single statement (a claim with nothing to write, or the finishes of one lease
        owner with nothing to claim) runs alone on an autocommit connection: no pipeline
        or transaction block around it, which saves ~0.3 ms of the claim an idle worker
        makes for a new job. Through a transaction pooler (Database.pin_isolation) every
        round trip begins and ends a READ COMMITTED transaction of its own, in the same
        pipeline.
        """
        if claim is not None and claim.limit <= 0:
            claim = None
        if claim is None or not claim.limited:
            return self._round_trip(conn, finishes, claim)
        trip = self._round_trip(conn, finishes, claim)
        taken = len(trip.claimed)
        if taken >= claim.limit:
            return trip
        try:
            plain = self._round_trip(conn, (), claim.plain(claim.limit - taken))
        except psycopg.Error as error:
            if conn.closed or conn.broken:
                raise
            # The finishes written and the jobs claimed by the first round trip are
            # committed: they must reach the worker, whatever the second did.
            report = dataclasses.replace(
                trip.report, plain_error=f"{type(error).__name__}: {str(error).strip()}"
            )
            return dataclasses.replace(trip, report=report)
        return dataclasses.replace(trip, claimed=[*trip.claimed, *plain.claimed])

    def _claim_alone(self, conn: psycopg.Connection[Any], claim: ClaimRequest) -> RoundTrip:
        """The round trip of a claim with nothing to write: the claim statement alone,
        announced (no finish notifies in its transaction)."""
        if claim.limited:
            jobs, report = self.claim_limited(conn, claim, announced=True)
            return RoundTrip({}, jobs, report)
        if claim.aging is not None or claim.queue_aging:
            return RoundTrip({}, self.claim_jobs_aged(conn, claim, announced=True))
        if claim.after is None:
            return RoundTrip({}, self.claim_jobs(conn, claim, announced=True))
        return RoundTrip({}, self.claim_jobs_after(conn, claim, announced=True))

    def _round_trip(
        self,
        conn: psycopg.Connection[Any],
        finishes: Sequence[Finish],
        claim: ClaimRequest | None,
    ) -> RoundTrip:
        if not finishes and claim is None:
            return RoundTrip({}, [])
        pinned = _pinned_per_transaction(conn)
        if conn.autocommit and not finishes and claim is not None and not pinned:
            return self._claim_alone(conn, claim)
        if conn.autocommit and claim is None and _one_owner(finishes) and not pinned:
            return RoundTrip(self.finish_jobs(conn, finishes), [])
        taker = _sequence_taker(finishes, claim)
        owners = finish_params(finishes, taker)
        cursors = []
        claim_cursor: psycopg.Cursor[Any] | None = None
        # The jobs the finish hands over come with a plain claim's rows (its _handing
        # form); after a limited claim, by a statement of their own.
        handing = taker is not None and claim is not None and not claim.limited
        handed_cursor = None
        # On an autocommit connection the statements of a pipeline up to its sync run as
        # one implicit transaction (an error in one rolls them all back): no BEGIN and
        # COMMIT, which psycopg's transaction() in a pipeline sends with a sync (and a
        # round trip) each, about three round trips instead of one.
        block: contextlib.AbstractContextManager[Any] = (
            contextlib.nullcontext() if own_transaction(conn) else conn.transaction()
        )
        try:
            with translate_errors(self.schema), conn.pipeline(), block:
                if pinned:
                    conn.cursor().execute(self._statements["begin_read_committed_block"])
                self._send_logs(conn, finishes)  # the attempts' log lines, before their finish
                for params in owners:
                    cursor = conn.cursor(row_factory=tuple_row)
                    cursor.execute(self._binary_statements["finish_jobs"], params)
                    cursors.append(cursor)
                if not handing:
                    handed_cursor = self.sequence_handed(conn, taker, claim)
                if claim is not None:
                    claim_cursor = self._send_claim(conn, claim, bool(owners), handing)
                if pinned:
                    conn.cursor().execute(self._statements["commit_block"])
        except BaseException:
            if pinned:
                _roll_back_failed_block(conn)
            raise
        # finish_jobs returns (id, status, notifications sent).
        written = {row[0]: row[1] for cursor in cursors for row in cursor.fetchall()}
        rows = claim_cursor.fetchall() if claim_cursor is not None else []
        claimed, handed_jobs = _split_handed(rows) if handing else (rows, [])
        if claim is not None and not claim.limited:
            claimed.sort(key=claim_order)
        trip = _with_handed(_trip(written, claim, claimed), handed_cursor)
        return dataclasses.replace(trip, handed=handed_jobs) if handed_jobs else trip

    def _send_claim(
        self, conn: psycopg.Connection[Any], claim: ClaimRequest, finished: bool, handing: bool
    ) -> psycopg.Cursor[Any]:
        """Send the round trip's claim (pipeline mode): announced when nothing is finished
        in its transaction, its _handing form when the finish names this worker the
        sequences' taker (rows: ``claimed_or_handed``)."""
        name, params = claim_statement(claim)
        if not finished:  # nothing finished in this transaction: announce it
            name = f"{name}_announced"
        elif handing:
            name = f"{name}_handing"
        factory = claimed_or_handed if handing else claimed_jobs
        cursor: psycopg.Cursor[Any] = conn.cursor(row_factory=factory(claim.worker_id))
        cursor.adapters.register_loader("jsonb", JsonbUndecodedLoader)
        cursor.execute(self._statements[name], params)
        return cursor

    def sequence_handed(
        self, conn: psycopg.Connection[Any], taker: str | None, claim: ClaimRequest | None
    ) -> psycopg.Cursor[ClaimedJob] | None:
        """After the finish: the jobs it handed to the taker (their cursor), if any (a
        limited claim's round trip; a plain claim returns them itself: _handing)."""
        if taker is None or claim is None:
            return None
        cursor = conn.cursor(row_factory=claimed_jobs(claim.worker_id))
        cursor.adapters.register_loader("jsonb", JsonbUndecodedLoader)
        cursor.execute(self._statements["sequence_handed"], {"worker_id": claim.worker_id})
        return cursor

    def begin_read_committed_block(self, conn: psycopg.Connection[Any]) -> None:
        """Begin a transaction block, READ COMMITTED whatever the server's default (on an
        autocommit connection; a pipelined round trip sends the same statement)."""
        self._rows(conn, "begin_read_committed_block", None)

    def commit_block(self, conn: psycopg.Connection[Any]) -> None:
        self._rows(conn, "commit_block", None)
