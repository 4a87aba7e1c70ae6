"""``pgtasks doctor``: turn database facts into findings with a figure and a remedy.

The checks are pure functions of rows read by ``DoctorQueries``; ``diagnose`` runs
them all. Each finding has a level: ``ok``, ``warning`` or ``critical``; the command
exits 0 when all are ok, 1 with warnings, 2 with anything critical.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from .._dsn import describe_dsn
from .._errors import SchemaNotMigratedError
from .._payload import MAX_DECODE_DEPTH, MAX_JSON_DEPTH
from .._text import printable
from .doctor_jobs import (
    DEEP_HISTORY_SCAN,
    check_deep_history_payloads,
    check_deep_payloads,
    check_held_sequences,
    check_main_module_tasks,
    check_unknown_tasks,
)
from .findings import LEVELS, Finding

if TYPE_CHECKING:
    from .app import App

Row = Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """Seconds or ratios past which a check warns, then turns critical."""

    snapshot_warning: float = 300.0
    snapshot_critical: float = 3600.0
    slot_xid_warning: int = 10_000_000
    slot_xid_critical: int = 100_000_000
    prepared_warning: float = 60.0
    prepared_critical: float = 3600.0
    dead_ratio_warning: float = 0.2
    dead_ratio_critical: float = 0.5
    dead_minimum: int = 10_000
    index_bytes_per_entry_warning: float = 500.0
    index_minimum_bytes: int = 8 * 1024 * 1024
    backlog_warning: float = 300.0
    backlog_critical: float = 3600.0
    connections_warning: float = 0.8
    connections_critical: float = 0.95
    replica_lag_warning: float = 60.0
    replica_lag_critical: float = 600.0


def _level(value: float, warning: float, critical: float) -> str:
    if value >= critical:
        return "critical"
    if value >= warning:
        return "warning"
    return "ok"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def check_snapshot(row: Row | None, limits: Thresholds) -> Finding:
    if row is None or row["transaction_seconds"] is None:
        return Finding("xmin horizon", "ok", "no open transaction holds an old snapshot")
    seconds = float(row["transaction_seconds"])
    level = _level(seconds, limits.snapshot_warning, limits.snapshot_critical)
    who = f"pid {row['pid']} ({row['application_name'] or 'no application_name'}, {row['state']})"
    return Finding(
        "xmin horizon",
        level,
        f"oldest snapshot: {who}, transaction open for {_duration(seconds)},"
        f" {row['xid_age']} transactions behind",
        ""
        if level == "ok"
        else "dead job rows cannot be vacuumed while it stays open and claims slow down:"
        f" end it (SELECT pg_terminate_backend({row['pid']})) and keep transactions short",
    )


def check_slots(rows: Sequence[Row], limits: Thresholds) -> Finding:
    worst = None
    for row in rows:
        age = max(row["xmin_age"] or 0, row["catalog_xmin_age"] or 0)
        if worst is None or age > worst[1]:
            worst = (row, age)
    if worst is None:
        return Finding("replication slots", "ok", "no replication slots")
    row, age = worst
    level = _level(age, limits.slot_xid_warning, limits.slot_xid_critical)
    return Finding(
        "replication slots",
        level,
        f"slot {row['slot_name']!r} ({'active' if row['active'] else 'inactive'})"
        f" holds the horizon {age} transactions back",
        ""
        if level == "ok"
        else "drop the slot if its consumer is gone"
        " (SELECT pg_drop_replication_slot(...)), or make the consumer catch up",
    )


def check_prepared(rows: Sequence[Row], limits: Thresholds) -> Finding:
    if not rows:
        return Finding("prepared transactions", "ok", "no prepared transactions")
    oldest = rows[0]
    seconds = float(oldest["seconds"])
    level = _level(seconds, limits.prepared_warning, limits.prepared_critical)
    return Finding(
        "prepared transactions",
        level,
        f"{len(rows)} prepared transaction(s); the oldest ({oldest['gid']!r}) is"
        f" {_duration(seconds)} old",
        ""
        if level == "ok"
        else "COMMIT PREPARED or ROLLBACK PREPARED it; until then vacuum cannot remove dead rows",
    )


def check_tables(rows: Sequence[Row], limits: Thresholds) -> list[Finding]:
    findings = []
    for row in rows:
        live, dead = int(row["live"] or 0), int(row["dead"] or 0)
        ratio = dead / (live + dead) if live + dead else 0.0
        level = (
            _level(ratio, limits.dead_ratio_warning, limits.dead_ratio_critical)
            if dead >= limits.dead_minimum
            else "ok"
        )
        since = row["seconds_since_vacuum"]
        vacuumed = "never vacuumed" if since is None else f"vacuumed {_duration(float(since))} ago"
        findings.append(
            Finding(
                f"table {row['table_name']}",
                level,
                f"{live} live, {dead} dead rows ({ratio:.0%} dead), {vacuumed}",
                ""
                if level == "ok"
                else "check the xmin horizon above, then VACUUM the table; prune finished jobs"
                " (pgtasks prune) so fewer rows churn",
            )
        )
    return findings


def check_indexes(rows: Sequence[Row], limits: Thresholds) -> list[Finding]:
    findings = []
    for row in rows:
        size, entries = int(row["bytes"]), max(1, int(row["entries"] or 0))
        per_entry = size / entries
        level = (
            "warning"
            if size >= limits.index_minimum_bytes
            and per_entry >= limits.index_bytes_per_entry_warning
            else "ok"
        )
        findings.append(
            Finding(
                f"index {row['index_name']}",
                level,
                f"{size / 1024 / 1024:.1f} MiB for {int(row['entries'] or 0)} entries"
                f" ({per_entry:.0f} bytes each; a compact btree needs about 40)",
                ""
                if level == "ok"
                else "the index is bloated: REINDEX INDEX CONCURRENTLY it once the xmin horizon"
                " is healthy",
            )
        )
    return findings


def check_stuck(row: Row, lease_timeout: float) -> Finding:
    count = int(row["jobs"] or 0)
    if not count:
        return Finding("stuck jobs", "ok", "no job is running under a dead worker")
    seconds = float(row["oldest_seconds"] or 0)
    level = "critical" if seconds >= 10 * lease_timeout else "warning"
    return Finding(
        "stuck jobs",
        level,
        f"{count} job(s) running under dead or silent workers, the oldest claimed"
        f" {_duration(seconds)} ago",
        "a running worker rescues them within its rescue interval: start one if none runs",
    )


def check_backlog(row: Row, limits: Thresholds) -> Finding:
    count = int(row["jobs"] or 0)
    if not count:
        return Finding("backlog", "ok", "no due job is waiting")
    seconds = float(row["oldest_seconds"] or 0)
    level = _level(seconds, limits.backlog_warning, limits.backlog_critical)
    return Finding(
        "backlog",
        level,
        f"{count} due job(s) waiting, the oldest for {_duration(seconds)}",
        ""
        if level == "ok"
        else "add workers or concurrency, or check that workers serve these queues (pgtasks stats)",
    )


def check_exhausted(row: Row) -> Finding:
    count = int(row["jobs"] or 0)
    if not count:
        return Finding(
            "pending jobs out of attempts", "ok", "every pending job has an attempt left"
        )
    return Finding(
        "pending jobs out of attempts",
        "warning",
        f"{count} pending job(s) have attempts = max_attempts (the first: job"
        f" {row['first_id']}); a claim gives each one more attempt (max_attempts + 1)",
        "a row was set back to pending by hand: use `pgtasks jobs retry ID`, which raises"
        " max_attempts itself, instead of UPDATE … SET status = 'pending'",
    )


def check_connections(row: Row, limits: Thresholds) -> Finding:
    usable = max(1, int(row["max_connections"]) - int(row["reserved"]))
    used = int(row["used"])
    ratio = used / usable
    level = _level(ratio, limits.connections_warning, limits.connections_critical)
    return Finding(
        "connections",
        level,
        f"{used} of {usable} usable connections in use ({ratio:.0%})",
        ""
        if level == "ok"
        else "lower pool sizes / worker counts or put a pooler in front;"
        " each worker uses 4 connections plus its app pool",
    )


def check_isolation(app: App, pinned: Row, default: str | None) -> Finding:
    """The isolation pgtasks' connections run in (pinned READ COMMITTED) and the database's
    default for pgtasks' role (``default``: None when it could not be read)."""
    level = str(pinned["isolation"])
    shown = default.upper() if default else "unknown"
    if app.database.pooled:
        # Through a transaction pooler a statement runs at the server connection's default:
        # the pooler check says whether that is READ COMMITTED.
        return Finding(
            "isolation",
            "ok" if level == "read committed" else "warning",
            f"database default {shown}; through the pooler pgtasks pins READ COMMITTED per"
            " transaction (the worker's claims and finishes, explicit transactions), lone"
            f" statements run at its server connections' default ({level.upper()})",
            "" if level == "read committed" else "see the pooler check",
        )
    if level != "read committed":
        return Finding(
            "isolation",
            "critical",
            f"this pgtasks connection runs {level.upper()} although pgtasks pins READ"
            " COMMITTED: limits could be exceeded and workflows stall",
            "a pooler between pgtasks and PostgreSQL drops the startup option that pins it:"
            " declare it (App(dsn=<pooler>, session_dsn=<the server itself>)), or set"
            " default_transaction_isolation = 'read committed' for the role pgtasks uses",
        )
    if default is None or default == "read committed":
        return Finding("isolation", "ok", f"database default {shown}; pgtasks runs READ COMMITTED")
    return Finding(
        "isolation",
        "ok",
        f"database default {shown}; every pgtasks connection runs READ COMMITTED"
        " (pinned), so limits, fencing and workflows hold. Connections your code passes with"
        " connection= keep your level",
    )


def default_isolation(app: App) -> str | None:
    """The isolation a session of pgtasks' role starts with on its database, before pgtasks
    pins it: read on a connection of its own without the pin (it runs this one read), to
    the session DSN or ``dsn``. None when it cannot be read."""
    database = app.database
    try:
        with psycopg.connect(
            database.session_dsn or database.dsn,
            autocommit=True,
            connect_timeout=max(1, round(database.pools.connect_timeout)),
            application_name="pgtasks doctor",
        ) as conn:
            return str(app.queries.get_session_defaults(conn)["isolation"])
    except psycopg.Error:
        return None


def check_limits(row: Row, declared: Sequence[str]) -> list[Finding]:
    """The limits table: values the claim cannot take, pending jobs under limits that are
    not stored, and jobs under more limit instances than the claim takes."""
    findings = []
    stored = int(row["stored"] or 0)
    bad = [printable(name) for name in row["bad_values"] or []]
    if bad:
        findings.append(
            Finding(
                "limits values",
                "warning",
                f"{len(bad)} stored limit(s) hold values the claim cannot take as they are"
                f" ({', '.join(bad[:5])}): it clamps them (tokens, burst, period, refill time)",
                "start a worker of the app that declares them (it stores its values again),"
                " or DELETE the rows: their jobs then run unlimited",
            )
        )
    unstored = [printable(name) for name in row["unstored"] or []]
    if unstored:
        findings.append(
            Finding(
                "limits not stored",
                "warning",
                f"{int(row['unstored_jobs'] or 0)} pending job(s) count in limits that are"
                f" not stored ({', '.join(unstored[:5])}): they run without those limits",
                "if the limits should hold, start a worker of the app that declares them"
                " (workers store their app's limits when they start); if they were lifted on"
                " purpose, nothing to do",
            )
        )
    overlimited = int(row["overlimited"] or 0)
    if overlimited:
        findings.append(
            Finding(
                "jobs under too many limits",
                "warning",
                f"{overlimited} pending job(s) count in more than 8 limit instances (the first:"
                f" job {row['first_overlimited']}); the claim leaves them pending",
                "rows written by hand (enqueues refuse them): cancel them"
                " (pgtasks jobs cancel ID) or enqueue them again",
            )
        )
    if not findings:
        undeclared = stored - len(declared)
        summary = f"{stored} limit(s) stored, every value usable, no job left out"
        if declared and undeclared > 0:
            summary += f" ({undeclared} not declared by this app)"
        findings.append(Finding("limits", "ok", summary))
    return findings


def limits_unreadable(error: Exception) -> Finding:
    return Finding(
        "limits",
        "critical",
        f"the limits table cannot be read ({type(error).__name__}:"
        f" {' '.join(str(error).split())}): workers claim plain jobs only and retry the"
        " limited claim with backoff",
        "run `pgtasks migrate`; if the table was changed by hand, restore it (see"
        " docs/reference/schema.md)",
    )


#: How far back ``doctor`` counts healed steps and tolerated trigger errors.
WORKFLOW_INCIDENT_WINDOW = 86400.0


def check_workflows(health: Row, latest: Sequence[Row], heal_interval: float) -> Finding:
    """Stuck workflow steps now, steps the healing pass healed and trigger errors tolerated
    in the last day, and steps it could not heal."""
    stuck, healed = int(health["stuck"] or 0), int(health["healed"] or 0)
    tolerated, unhealable = int(health["tolerated"] or 0), int(health["unhealable"] or 0)
    last = f" (latest: job {latest[0]['job_id']}: {latest[0]['detail']})" if latest else ""
    counts = (
        f"in the last day the healing pass healed {healed} stuck step(s) and the workflow"
        f" triggers tolerated {tolerated} error(s)"
    )
    if unhealable:
        return Finding(
            "workflows",
            "critical",
            f"{unhealable} stuck step(s) could not be moved on by the healing pass; {counts}{last}",
            "a hand-edited row breaks them: see `pgtasks workflows show ID`, then cancel the"
            " workflow (`pgtasks workflows cancel ID`) or repair the row",
        )
    if stuck:
        return Finding(
            "workflows",
            "warning",
            f"{stuck} waiting step(s) have no unfinished predecessor; a worker's healing pass"
            f" moves them on within heal_interval ({heal_interval:g} s); {counts}",
            "start a worker if none runs, or run `pgtasks workflows heal` now",
        )
    if healed or tolerated:
        return Finding(
            "workflows",
            "warning",
            f"no stuck step now; {counts}{last}",
            "each was recorded with its cause: `pgtasks workflows show ID` lists a"
            " workflow's incidents; hand-edited workflow rows are the usual cause",
        )
    return Finding(
        "workflows",
        "ok",
        f"no stuck workflow step; {counts}",
    )


def check_pooler(app: App, defaults: Row) -> Finding:
    """How the app connects: directly, or through a transaction pooler with or without a
    session connection (without one: polling, no leader election); through a pooler, the
    transaction isolation its server connections start with."""
    database = app.database
    if not database.pooled:
        return Finding("pooler", "ok", "direct connections (no transaction pooler declared)")
    where = describe_dsn(database.dsn)
    prepared = "on" if database.prepared_statements else "off"
    isolation = str(defaults["isolation"])
    if isolation != "read committed":
        return Finding(
            "pooler",
            "critical",
            f"the pooler's server connections at {where} start transactions in {isolation}:"
            " claims, limits and workflows rely on READ COMMITTED; a pooled connection"
            " cannot be pinned per session, and pgtasks pins only its claims, finishes and"
            " explicit transactions per transaction (rescues, releases and other lone"
            " statements run at this default)",
            "set default_transaction_isolation = 'read committed' for pgtasks' role (ALTER"
            " ROLE … SET) or in the pooler's connect_query for pgtasks' database entry",
        )
    session = database.configured_session_dsn
    if session is None:
        return Finding(
            "pooler",
            "warning",
            f"{where} goes through a transaction pooler and no session_dsn is set: workers"
            f" find new jobs by polling (every {app.poll_interval:g} s) instead of LISTEN,"
            " job.get() polls, beat runs without leader election (every beat enqueues each"
            " tick; the tick key keeps one job), the pruner runs without its lock, and"
            " migrate refuses to run",
            "set App(session_dsn=...) or PGTASKS_SESSION_DSN to a direct connection to the"
            " server (not through the pooler)",
        )
    return Finding(
        "pooler",
        "ok",
        f"{where} goes through a transaction pooler (prepared statements {prepared});"
        f" LISTEN, beat and pruner locks and migrations use {describe_dsn(session)}",
    )


def check_replica(app: App, primary_lsn: str | None, limits: Thresholds) -> Finding | None:
    """The replica's health when the app has one (None otherwise): reachable, a standby,
    how far behind, and what hot_standby_feedback means for the primary."""
    database = app.database
    if not database.replica_dsn:
        return None
    where = describe_dsn(database.replica_dsn)
    try:
        with database.connect(replica=True, application_name="pgtasks doctor") as conn:
            row = app.queries.get_replica_state(conn, primary_lsn)
    except psycopg.Error as error:
        return Finding(
            "replica",
            "warning",
            f"replica {where} cannot be read ({type(error).__name__}): the dashboard, stats,"
            " jobs list and metrics read the primary meanwhile",
            "check that the replica runs and that replica_dsn is right",
        )
    if not row["standby"]:
        return Finding(
            "replica",
            "warning",
            f"{where} is not a standby (pg_is_in_recovery() is false): replica reads land on"
            " a primary",
            "point replica_dsn at a streaming replica of this database",
        )
    behind = row["behind_bytes"]
    age = row["replay_age"]
    lag = (
        f"{int(behind) / 1024 / 1024:.1f} MiB of WAL behind"
        if behind is not None
        else "lag unknown"
    )
    if behind and age is not None:
        lag += f", last replayed transaction {_duration(float(age))} old"
    feedback = row["hot_standby_feedback"] == "on"
    effect = (
        "hot_standby_feedback is on: long replica queries hold back the primary's xmin"
        " horizon (bloat; see the xmin horizon check)"
        if feedback
        else "hot_standby_feedback is off: a replica query that conflicts with replay is"
        f" cancelled after max_standby_streaming_delay ({row['max_standby_streaming_delay']})"
        " and retried, then read from the primary"
    )
    seconds = float(age) if behind and age is not None else 0.0
    level = _level(seconds, limits.replica_lag_warning, limits.replica_lag_critical)
    return Finding(
        "replica",
        level,
        f"{where}: {lag}; {effect}",
        ""
        if level == "ok"
        else "the dashboard, stats and metrics show the queue as it was: check the"
        " replica's replay (pg_stat_replication on the primary, its log)",
    )


def diagnose(
    app: App, conn: psycopg.Connection[Any], limits: Thresholds | None = None
) -> list[Finding]:
    limits = limits or Thresholds()
    store = app.queries
    replica = check_replica(app, store.get_wal_position(conn), limits)
    findings = [
        check_snapshot(store.get_oldest_snapshot(conn), limits),
        check_slots(store.get_replication_slots(conn), limits),
        check_prepared(store.get_prepared_transactions(conn), limits),
        *check_tables(store.get_table_health(conn), limits),
        *check_indexes(store.get_index_sizes(conn), limits),
        check_stuck(store.get_stuck_jobs(conn, lease_timeout=app.lease_timeout), app.lease_timeout),
        check_backlog(store.get_backlog(conn), limits),
        check_exhausted(store.get_exhausted_pending_jobs(conn)),
        check_connections(store.get_connection_usage(conn), limits),
        check_isolation(app, store.get_isolation(conn), default_isolation(app)),
        check_unknown_tasks(store.get_unknown_task_jobs(conn, lease_timeout=app.lease_timeout)),
        check_main_module_tasks(store.get_main_module_jobs(conn)),
        check_held_sequences(store.get_sequence_holds(conn)),
        check_deep_payloads(
            store.get_deep_payloads(conn, depth=MAX_JSON_DEPTH, decode_depth=MAX_DECODE_DEPTH)
        ),
        check_deep_history_payloads(
            store.get_deep_history_payloads(
                conn, depth=MAX_JSON_DEPTH, decode_depth=MAX_DECODE_DEPTH, scan=DEEP_HISTORY_SCAN
            ),
            DEEP_HISTORY_SCAN,
        ),
        check_workflows(
            store.get_workflow_health(conn, since=WORKFLOW_INCIDENT_WINDOW),
            store.list_workflow_incidents(conn, limit=1),
            app.heal_interval,
        ),
        check_pooler(app, store.get_session_defaults(conn)),
        *([replica] if replica is not None else []),
        *(
            []
            if app.store_router.single
            else [check_stranded(app, store.count_stranded_jobs(conn))]
        ),
    ]
    try:
        problems = store.get_limit_problems(conn)
    except (psycopg.Error, SchemaNotMigratedError) as error:
        findings.append(limits_unreadable(error))
    else:
        declared = [definition.name for definition in app.limit_definitions()]
        findings += check_limits(problems, declared)
    return findings


def check_stranded(app: App, rows: Sequence[Row]) -> Finding:
    """Unfinished jobs of queues that route to another store now (a route changed before
    the queue drained): no worker of their queue's store sees them."""
    stranded = [
        (row["queue"], int(row["jobs"]), app.store_of_queue(row["queue"]))
        for row in rows
        if app.store_of_queue(row["queue"]) != app.store_name
    ]
    if not stranded:
        return Finding("stranded jobs", "ok", "every unfinished job's queue routes here")
    total = sum(jobs for _, jobs, _ in stranded)
    listed = ", ".join(f"{queue} ({jobs}, routed to {to})" for queue, jobs, to in stranded)
    return Finding(
        "stranded jobs",
        "warning",
        f"{total} unfinished job(s) in store {app.store_name!r} whose queue routes to"
        f" another store now: {listed}",
        f"run `pgtasks worker --store {app.store_name}` (it claims every queue of its"
        " store) until they finish, or route the queue back; move queues with"
        " `pgtasks queues move QUEUE --to STORE`",
    )


__all__ = ["LEVELS", "Finding", "Thresholds", "check_unknown_tasks", "diagnose", "exit_code"]


def exit_code(findings: list[Finding]) -> int:
    return max((LEVELS.index(finding.level) for finding in findings), default=0)
