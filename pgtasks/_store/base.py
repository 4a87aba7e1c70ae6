"""QueriesBase: statement rendering and the two thin executors (sync and async).

Queries (``queries.py``) and its per-area query mixins (``<area>.py``) build on it;
no other module runs SQL.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Literal, TypeVar, overload

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.abc import Buffer
from psycopg.pq import PipelineStatus, TransactionStatus
from psycopg.rows import dict_row, tuple_row
from psycopg.types.datetime import TimestamptzLoader
from psycopg.types.json import JsonbLoader
from typing_extensions import Self

from .._errors import SchemaNotMigratedError
from .._payload import Unreadable, decode_stored
from ..sql import load_fragments, load_queries
from .notify_mode import AUTO_NOTIFY_SPACING, EnqueueNotifications

Params = Mapping[str, Any]
Row = dict[str, Any]
T = TypeVar("T")

#: A text-format placeholder (``%(name)s``), not an escaped ``%%``.
_TEXT_PLACEHOLDER = re.compile(rb"(?<!%)%\((\w+)\)s")

#: First key of every advisory lock pgtasks takes ("pgtk"); the second is per purpose.
ADVISORY_LOCK_CLASS_MIGRATE = 0x7067746B
#: First key of the beat leader lock (a session lock on beat's own connection).
ADVISORY_LOCK_CLASS_BEAT = 0x70677462


#: The datetimes that stand for PostgreSQL's 'infinity' and '-infinity' in rows pgtasks
#: shows (Python's datetime has no infinity; psycopg would refuse the row).
INFINITY = datetime.max.replace(tzinfo=timezone.utc)
MINUS_INFINITY = datetime.min.replace(tzinfo=timezone.utc)


#: The longest statement psycopg keeps its parse of (longer ones are split into parts by
#: a regular expression each time they run).
PARSE_CACHED_LENGTH = 4096


#: Lines of a statement's header comment sent with it: what pg_stat_activity shows of it.
HEADER_LINES = 1


@functools.lru_cache(maxsize=1024)
def without_inner_comments(statement: str) -> str:
    """``statement`` without its comment lines after the first HEADER_LINES of its header
    comment (the leading ``--`` lines, which pg_stat_activity shows) and without the
    indentation of lines that start outside a string: the text sent and parsed is shorter.

    psycopg keeps the parse of a statement up to PARSE_CACHED_LENGTH bytes long and
    splits a longer one anew on every execution; the finish statement, with its
    comments, was longer. Only whole lines of comment outside any string, quoted name or
    dollar-quoted text are dropped; a comment after code on a line stays.

    Cached: every store's Queries strip the same texts (an App per schema, a view per
    store), and the scan costs a tenth of a second for them all.
    """
    lines = statement.splitlines()
    header = 0
    while header < len(lines) and lines[header].lstrip().startswith("--"):
        header += 1
    kept = lines[: min(header, HEADER_LINES)]
    quote: str | None = None  # the closing delimiter of the string the line starts in
    for line in lines[header:]:
        if quote is None:
            if line.lstrip().startswith("--"):
                continue
            # Outside any string, a line's indentation is only whitespace between tokens.
            kept.append(line.strip())
        else:
            kept.append(line)
        quote = _open_quote_after(line, quote)
    return "\n".join(kept)


#: What opens a string, a quoted name, a dollar-quoted text or a comment in SQL.
_SQL_OPENING = re.compile(r"""(?i)(?<![\w$])E'|'|"|\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$|--|/\*""")
#: The rest of a string up to its closing quote: standard (``''`` escapes a quote), and
#: with backslash escapes (``E'…'``).
_STRING_REST = {
    "'": re.compile(r"(?:[^']|'')*'(?!')"),
    "E'": re.compile(r"(?:[^'\\]|\\.|'')*'(?!')"),
}


#: The closing delimiter of an opening that is not its own (a dollar quote's is its tag).
_CLOSING = {"E'": "E'", "/*": "*/"}


def _open_quote_after(line: str, quote: str | None) -> str | None:
    """The closing delimiter still awaited at the end of ``line`` when it starts inside
    the text that ``quote`` closes (None: outside any), for without_inner_comments."""
    position = 0
    while True:
        if quote is not None:
            rest = _STRING_REST.get(quote)
            if rest is not None:
                match = rest.match(line, position)
                if match is None:
                    return quote
                position = match.end()
            else:  # a quoted name, a dollar-quoted text, a block comment
                end = line.find(quote, position)
                if end < 0:
                    return quote
                position = end + len(quote)
            quote = None
        opening = _SQL_OPENING.search(line, position)
        if opening is None or opening.group() == "--":
            return None
        position = opening.end()
        opened = opening.group()
        quote = _CLOSING.get(opened.upper(), opened)


class InfinityTimestamptzLoader(TimestamptzLoader):
    """timestamptz with 'infinity' and '-infinity' (a row written by hand) readable."""

    def load(self, data: Any) -> datetime:
        if data == b"infinity":
            return INFINITY
        if data == b"-infinity":
            return MINUS_INFINITY
        return super().load(data)


class GuardedJsonbLoader(JsonbLoader):
    """jsonb decoded for an operator's read (jobs list and show, the dashboard, a result):
    a value that cannot be decoded (nested past MAX_DECODE_DEPTH) reads as an
    :class:`~pgtasks._payload.Unreadable` saying why, instead of failing the whole read."""

    def load(self, data: Buffer) -> Any:
        if len(data) == 2:
            if data == b"{}":
                return {}
            if data == b"[]":
                return []
        try:
            return decode_stored(str(data, "utf-8", "surrogatepass"))
        except ValueError as error:
            return Unreadable(str(error))


class JsonbUndecodedLoader(JsonbLoader):
    """jsonb as its text, not decoded: the claim's payloads (args, kwargs, meta) are
    decoded per job afterwards (``claims.claimed_jobs``), each guarded, so a payload
    nobody can decode (nested thousands deep, written by SQL) fails only its own job and
    never the reply that carries the others. An empty array or object (most jobs' kwargs
    and meta) comes as one already."""

    def load(self, data: Buffer) -> Any:
        if len(data) == 2:
            if data == b"{}":
                return {}
            if data == b"[]":
                return []
        return str(data, "utf-8", "surrogatepass")


#: Queries whose rows an operator reads (jobs list/show, get_jobs): any timestamp loads.
#: (The claim clamps run_at in SQL instead: this loader is slower than psycopg's C one.)
_INFINITE_TIMESTAMPS = frozenset(
    {
        "get_job",
        "get_jobs",
        "park_job",
        "start_wait",
        "get_job_steps",
        "list_jobs",
        "list_jobs_page",
        "list_finished_jobs_page",
        "list_unfinished_jobs_page",
        "list_jobs_scan",
        "list_workflow_jobs_page",
        "get_job_page",
        "list_workflows",
        "list_running_workflows",
        "list_ended_workflows",
        "list_workflows_scan",
    }
)


#: Queries whose jsonb values load guarded (GuardedJsonbLoader): a row nested past what
#: pgtasks decodes is shown as unreadable, the others as they are.
_GUARDED_JSON = _INFINITE_TIMESTAMPS | {"get_job_outcome", "get_workflow_jobs"}


def notification_channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel of a schema's jobs."""
    return f"pgtasks.{schema}"


#: Errors that mean the schema is missing or older than the code.
_NOT_MIGRATED = (
    pg_errors.UndefinedTable,
    pg_errors.InvalidSchemaName,
    pg_errors.UndefinedColumn,
    pg_errors.UndefinedFunction,
)


def not_migrated_error(schema: str, error: psycopg.Error) -> SchemaNotMigratedError:
    return SchemaNotMigratedError(
        f"the pgtasks schema {schema!r} is missing or out of date"
        f" ({error.diag.message_primary}):"
        " run `pgtasks migrate -A module:app` (or app.migrate())"
    )


@contextlib.contextmanager
def translate_errors(schema: str) -> Iterator[None]:
    """Turn "relation does not exist"-style errors into an actionable SchemaNotMigratedError."""
    try:
        yield
    except _NOT_MIGRATED as error:
        raise not_migrated_error(schema, error) from error


def own_transaction(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """True when the next statement on ``conn`` runs as a transaction of its own: an
    autocommit connection, idle, not in pipeline mode (where the statements up to the
    next sync share one transaction).

    A round trip's statements then need no BEGIN and COMMIT; ``insert_and_notify_job``
    sets a transaction-local flag that silences the notify trigger, which inside a longer
    transaction would silence the caller's later inserts too.
    """
    pgconn = conn.pgconn
    return (
        conn.autocommit
        and pgconn.transaction_status == TransactionStatus.IDLE
        and pgconn.pipeline_status == PipelineStatus.OFF
    )


#: Claims that, run in a round trip that writes no outcome, announce themselves (see
#: QueriesBase._announced): ``<name>_announced`` is the same claim plus one notification.
ANNOUNCED_CLAIMS = (
    "claim_jobs",
    "claim_jobs_after",
    "claim_jobs_aged",
    "claim_limited",
)
#: Plain claims that, run after a finish that ended sequence jobs and named this worker
#: their taker, return the jobs the finish handed over too (QueriesBase._handing):
#: ``<name>_handing``, one statement where a round trip would send two.
HANDING_CLAIMS = ("claim_jobs", "claim_jobs_after", "claim_jobs_aged")


def _header_and_body(statement: bytes) -> tuple[str, str]:
    """A rendered statement's header comment lines (pg_stat_activity shows them: a
    statement built around it keeps them first) and the rest, its closing ";" left out."""
    lines = statement.decode().rstrip().removesuffix(";").splitlines()
    header = 0
    while header < len(lines) and lines[header].startswith("--"):
        header += 1
    return "\n".join(lines[:header]), "\n".join(lines[header:])


class _Rendered(dict[str, bytes]):
    """Statements by name, each made by ``render`` on first use (then kept)."""

    def __init__(self, render: Callable[[str], bytes]) -> None:
        super().__init__()
        self._make = render

    def __missing__(self, name: str) -> bytes:
        text = self._make(name)
        self[name] = text
        return text


class QueriesBase:
    """Rendered statements of one schema, and how to run them."""

    def __init__(
        self,
        schema: str,
        *,
        notify_enqueues: bool = True,
        notify: str | None = None,
        notify_interval: float = AUTO_NOTIFY_SPACING,
    ) -> None:
        self.schema = schema
        #: Whether a one-job enqueue notifies its queue's workers: "always", "off" or
        #: "auto" (DatabaseSettings.notify; None: notify_enqueues' "always" or "off").
        self.notifications = EnqueueNotifications(
            notify if notify is not None else ("always" if notify_enqueues else "off"),
            notify_interval,
        )
        self.notify_mode = self.notifications.mode
        self.notify_enqueues = self.notify_mode != "off"
        self.channel = notification_channel(schema)
        #: Finished jobs (payload "id,id,…"): result waiters listen here.
        self.done_channel = f"{self.channel}.done"
        #: Cancellation requests for running jobs (payload: the id): workers listen here.
        self.cancel_channel = f"{self.channel}.cancel"
        #: Jobs changed without finishing (claimed, retried, meta or progress written;
        #: payload: what changed, never a job's data): the dashboard listens here.
        self.activity_channel = f"{self.channel}.activity"
        #: A limited job left 'running' (payload "<lease owner>:<limit names>", migration
        #: flow_control): workers waiting for a slot of one of those limits claim at once.
        self.limits_channel = f"{self.channel}.limits"
        self._identifier = sql.Identifier(schema)
        #: The jobs table's qualified name, as text (for pg_get_serial_sequence).
        self.jobs_table = self._identifier.as_string(None) + ".jobs"
        #: The fragments statements share (``{job_filter}``), each rendered once.
        self._fragments: dict[str, sql.Composable] = {}
        self._fragments = {
            name: sql.SQL(self._render(without_inner_comments(text)).decode())
            for name, text in load_fragments().items()
        }
        #: The named queries (comment lines past their header left out: without_inner_comments),
        #: each rendered when first run: a process runs a few dozen of the 230, and
        #: rendering them all cost every App a few hundredths of a second of CPU.
        self._statements: dict[str, bytes] = _Rendered(self._statement)
        #: Statements whose parameters are sent in binary (``%(name)b``): arrays of many
        #: values dump several times faster so, and the server parses them faster too.
        self._binary_statements: dict[str, bytes] = _Rendered(
            lambda name: _TEXT_PLACEHOLDER.sub(rb"%(\1)b", self._statements[name])
        )

    def overriding(self, statements: Mapping[str, bytes]) -> Self:
        """A copy of these queries with ``statements`` in place of the named ones (tests and
        benchmarks: a claim made to fail, a statement as it was before a change). The others
        are rendered on first use, as here; the variants of a replaced claim (announced,
        handing) from its replacement, unless ``statements`` names them too."""
        copied = copy.copy(self)
        copied._statements = _Rendered(copied._statement)
        copied._statements.update(statements)
        copied._binary_statements = _Rendered(
            lambda name: _TEXT_PLACEHOLDER.sub(rb"%(\1)b", copied._statements[name])
        )
        return copied

    def _statement(self, name: str) -> bytes:
        """The named query ``name`` rendered for this schema (KeyError: no such query)."""
        claim = name.removesuffix("_announced")
        if claim != name and claim in ANNOUNCED_CLAIMS:
            return self._announced(self._statements[claim])
        claim = name.removesuffix("_handing")
        if claim != name and claim in HANDING_CLAIMS:
            return self._handing(self._statements[claim])
        return self._render(without_inner_comments(load_queries()[name].text))

    def _render(self, text: str) -> bytes:
        composed = sql.SQL(text).format(
            schema=self._identifier,
            channel=sql.Literal(self.channel),
            done_channel=sql.Literal(self.done_channel),
            cancel_channel=sql.Literal(self.cancel_channel),
            activity_channel=sql.Literal(self.activity_channel),
            limits_channel=sql.Literal(self.limits_channel),
            **self._fragments,
        )
        return composed.as_string(None).encode()

    def _announced(self, claim: bytes) -> bytes:
        """``claim`` sending one notification on the activity channel when it took any job
        (the rows, and their order, unchanged), for the dashboard's live pages.

        A round trip that also writes outcomes runs the claim as it is: its finish
        notifies (``done``, or ``retried``) in the same transaction. A claim alone (an idle
        worker's) would otherwise go unheard until the dashboard's next poll. The condition
        is evaluated once, before the first row; a claim that took nothing notifies nothing
        (claim_limited's report row, id NULL, is not a job taken).
        """
        comments, body = _header_and_body(claim)
        channel = sql.Literal(self.activity_channel).as_string(None)
        return (
            f"{comments}\nWITH claimed AS (\n{body}\n)\nSELECT * FROM claimed"
            f" WHERE (SELECT count(*) FROM (SELECT pg_notify({channel}, 'claimed')"
            " FROM claimed WHERE id IS NOT NULL LIMIT 1) AS notified) >= 0"
        ).encode()

    def _handing(self, claim: bytes) -> bytes:
        """``claim`` returning, after its own rows, the jobs the round trip's finish handed
        to this worker (migration sequence_handover; read by sequence_handed_jobs,
        migration sequence_handed_with_claim), each row with a last column ``handed``
        (claims.claimed_or_handed splits them).

        One statement where the round trip sent two: the claim's CTE sees what the finish
        before it wrote (the same transaction), and its rows are locked by this worker
        already (running: no claim reads them).
        """
        comments, body = _header_and_body(claim)
        function = self._identifier.as_string(None) + ".sequence_handed_jobs"
        return (
            f"{comments}\nWITH claimed AS (\n{body}\n)\n"
            "SELECT *, false AS handed FROM claimed\nUNION ALL\n"
            "SELECT handed.*, clock_timestamp() AS claimed_at, true AS handed"
            f" FROM {function}(%(worker_id)s) AS handed"
        ).encode()

    def _lock_params(self, lock_class: int) -> Params:
        """The parameters of a statement on this schema's advisory lock of ``lock_class``
        (migrations, beat, pruner, healer)."""
        return {"lock_class": lock_class, "schema": self.schema}

    def lock_migrations(self, conn: psycopg.Connection[Any]) -> None:
        """Take the schema's migration lock until the end of the caller's transaction: a
        migrator's, and every other change of the schema's tables (jobs_history's day
        partitions, a store's numbering), so that none overlaps a migration (granted at
        once to a migrator's own session; waited for under the lock_timeout in force)."""
        self._rows(conn, "lock_migrations", self._lock_params(ADVISORY_LOCK_CLASS_MIGRATE))

    # -- executors --
    @overload
    def _rows(
        self,
        conn: psycopg.Connection[Any],
        name: str,
        params: Params | None,
        *,
        binary: bool = ...,
        tuples: Literal[False] = ...,
    ) -> list[Row]: ...

    @overload
    def _rows(
        self,
        conn: psycopg.Connection[Any],
        name: str,
        params: Params | None,
        *,
        binary: bool = ...,
        tuples: Literal[True],
    ) -> list[tuple[Any, ...]]: ...

    def _rows(
        self,
        conn: psycopg.Connection[Any],
        name: str,
        params: Params | None,
        *,
        binary: bool = False,
        tuples: bool = False,
    ) -> list[Row] | list[tuple[Any, ...]]:
        """Run a named statement; ``binary`` sends its parameters in binary format;
        ``tuples`` returns plain tuples (cheaper than dicts) of a statement that returns rows.
        """
        statement = (self._binary_statements if binary else self._statements)[name]
        try:
            if tuples:
                # Hot path (enqueue): the statement returns rows, so no description check.
                with conn.cursor(row_factory=tuple_row) as cursor:
                    cursor.execute(statement, params)
                    return cursor.fetchall()
            with conn.cursor(row_factory=dict_row) as dict_cursor:
                if name in _INFINITE_TIMESTAMPS:
                    dict_cursor.adapters.register_loader("timestamptz", InfinityTimestamptzLoader)
                if name in _GUARDED_JSON:
                    dict_cursor.adapters.register_loader("jsonb", GuardedJsonbLoader)
                dict_cursor.execute(statement, params)
                return dict_cursor.fetchall() if dict_cursor.description is not None else []
        except _NOT_MIGRATED as error:
            raise not_migrated_error(self.schema, error) from error

    def _made(
        self,
        conn: psycopg.Connection[Any],
        name: str,
        params: Params | None,
        make: Callable[[Sequence[Any]], T],
    ) -> list[T]:
        """Run a named statement that returns rows, each made by ``make`` from its values
        as it is read: no row is kept but what ``make`` makes (a page reads thousands).
        Rows come in binary (times and arrays load faster than from text)."""
        try:
            with conn.cursor(row_factory=lambda _cursor: make) as cursor:
                cursor.execute(self._statements[name], params, binary=True)
                return cursor.fetchall()
        except _NOT_MIGRATED as error:
            raise not_migrated_error(self.schema, error) from error

    def _copy(self, conn: psycopg.Connection[Any], name: str, rows: Iterable[str]) -> None:
        """Run a named ``COPY … FROM STDIN`` statement with ``rows`` (pieces of its text
        format, each sent as soon as it is made)."""
        try:
            with conn.cursor() as cursor, cursor.copy(self._statements[name]) as copy:
                for piece in rows:
                    copy.write(piece)
        except _NOT_MIGRATED as error:
            raise not_migrated_error(self.schema, error) from error

    async def _acopy(
        self, conn: psycopg.AsyncConnection[Any], name: str, rows: Iterable[str]
    ) -> None:
        try:
            async with conn.cursor() as cursor, cursor.copy(self._statements[name]) as copy:
                for piece in rows:
                    await copy.write(piece)
        except _NOT_MIGRATED as error:
            raise not_migrated_error(self.schema, error) from error

    @overload
    async def _arows(
        self,
        conn: psycopg.AsyncConnection[Any],
        name: str,
        params: Params | None,
        *,
        binary: bool = ...,
        tuples: Literal[False] = ...,
    ) -> list[Row]: ...

    @overload
    async def _arows(
        self,
        conn: psycopg.AsyncConnection[Any],
        name: str,
        params: Params | None,
        *,
        binary: bool = ...,
        tuples: Literal[True],
    ) -> list[tuple[Any, ...]]: ...

    async def _arows(
        self,
        conn: psycopg.AsyncConnection[Any],
        name: str,
        params: Params | None,
        *,
        binary: bool = False,
        tuples: bool = False,
    ) -> list[Row] | list[tuple[Any, ...]]:
        statement = (self._binary_statements if binary else self._statements)[name]
        try:
            if tuples:
                async with conn.cursor(row_factory=tuple_row) as cursor:
                    await cursor.execute(statement, params)
                    return await cursor.fetchall()
            async with conn.cursor(row_factory=dict_row) as dict_cursor:
                if name in _INFINITE_TIMESTAMPS:
                    dict_cursor.adapters.register_loader("timestamptz", InfinityTimestamptzLoader)
                if name in _GUARDED_JSON:
                    dict_cursor.adapters.register_loader("jsonb", GuardedJsonbLoader)
                await dict_cursor.execute(statement, params)
                return await dict_cursor.fetchall() if dict_cursor.description is not None else []
        except _NOT_MIGRATED as error:
            raise not_migrated_error(self.schema, error) from error
