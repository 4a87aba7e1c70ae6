"""Migration steps and the locks their statements take (pure: parsing only).

A migration file is one or more steps. A file without step markers is one step that runs
in a transaction (every migration before online migrations, and any ordinary migration).
A marker line starts the next step::

    -- pgtasks:step transaction
    -- pgtasks:step concurrently
    -- pgtasks:step batched table=jobs size=10000

- ``transaction``: the statements run in one transaction under a short ``lock_timeout``;
  a lock not granted in time rolls it back and the step is tried again (backing off), so
  a catalog change never queues the table's readers and writers for longer than that.
- ``concurrently``: one ``CREATE [UNIQUE] INDEX CONCURRENTLY``, ``DROP INDEX
  CONCURRENTLY`` or ``REINDEX INDEX CONCURRENTLY`` statement, run outside a transaction:
  the table stays writable while the index is built.
- ``batched``: one statement run over ``id`` ranges of ``table``, ``size`` ids at a time,
  each range a transaction of its own (``%(start)s`` <= id < ``%(stop)s``): a backfill
  that never holds many row locks or one long transaction.

:func:`statement_locks` says which table locks a statement takes and what they block;
``pgtasks migrate --plan`` prints it, and tests/migration check it against pg_locks.

The files are parsed into steps in parsing.py (``Step``, ``parse_steps`` and
``split_statements``, imported from here too); this module says what they lock.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Container
from typing import Literal

from .parsing import (
    _WORD,
    _name,
)
from .parsing import (
    Step as Step,
)
from .parsing import (
    parse_steps as parse_steps,
)
from .parsing import (
    split_statements as split_statements,
)

#: What a lock does to the table's other users, from least to most disruptive.
#:   none:     no lock on a table that existed before the migration
#:   online:   reads, writes and claims go on (ACCESS SHARE … SHARE UPDATE EXCLUSIVE)
#:   brief:    blocks writes (or reads too) for a catalog change only: milliseconds, and
#:             never longer than lock_timeout while it waits for the lock
#:   blocking: blocks writes for a scan or a rewrite of the table: as long as the table is big
Effect = Literal["none", "online", "brief", "blocking"]
EFFECTS: tuple[Effect, ...] = ("none", "online", "brief", "blocking")

#: PostgreSQL's table lock modes, weakest first, with what each blocks of a queue's work.
LOCK_MODES = (
    "ACCESS SHARE",
    "ROW SHARE",
    "ROW EXCLUSIVE",
    "SHARE UPDATE EXCLUSIVE",
    "SHARE",
    "SHARE ROW EXCLUSIVE",
    "EXCLUSIVE",
    "ACCESS EXCLUSIVE",
)
BLOCKS = {
    "ACCESS SHARE": "nothing",
    "ROW SHARE": "nothing",
    "ROW EXCLUSIVE": "nothing",
    "SHARE UPDATE EXCLUSIVE": "nothing (reads, writes and claims go on)",
    "SHARE": "writes and claims",
    "SHARE ROW EXCLUSIVE": "writes and claims",
    "EXCLUSIVE": "writes and claims",
    "ACCESS EXCLUSIVE": "reads, writes and claims",
}


@dataclasses.dataclass(frozen=True)
class LockUse:
    """A lock a statement takes: on ``relation`` (a table, or an index for index
    statements), its ``mode``, and what it means for the queue (:data:`Effect`)."""

    relation: str
    mode: str
    effect: Effect
    note: str
    #: Reads every row of the relation (an index build, a validation, a full UPDATE).
    scans: bool = False

    def describe(self) -> str:
        return f"{self.mode} on {self.relation}: {self.note}"


_SHORT_FORMS = (
    "CREATE FUNCTION",
    "CREATE OR REPLACE FUNCTION",
    "CREATE TABLE",
    "CREATE STATISTICS",
)


def summarize(statement: str, width: int = 96) -> str:
    """One line naming what a statement does (schema qualifiers dropped)."""
    text = " ".join(
        statement.replace("{schema}.", "").replace("{{", "{").replace("}}", "}").split()
    )
    if text.upper().startswith(_SHORT_FORMS):
        text = text.split("(", 1)[0].strip()
    return text if len(text) <= width else text[: width - 1] + "…"


_T = _name("table")
_SUE, _AE = "SHARE UPDATE EXCLUSIVE", "ACCESS EXCLUSIVE"
#: (statement pattern, lock mode on the named relation, kind). Kinds: "none" (no lock on
#: an existing table), "online", "online-build" (an index built while the table is
#: used), "online-scan", "catalog" (held for a catalog change only), "scan" and
#: "rewrite" (held while the whole table is read or written).
_RULES: tuple[tuple[re.Pattern[str], str, str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE | re.DOTALL), mode, kind)
    for pattern, mode, kind in (
        (r"^CREATE\s+SCHEMA\b", "", "none"),
        (r"^CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\b", "", "none"),
        # A function's own lock only: no table waits for it.
        (r"^DROP\s+FUNCTION\b", "", "none"),
        (r"^CREATE\s+(?:UNLOGGED\s+)?TABLE\b", "", "none"),
        (r"^CREATE\s+(?:OR\s+REPLACE\s+)?VIEW\b", "", "none"),
        (r"^CREATE\s+TYPE\b", "", "none"),
        (r"^COMMENT\s+ON\b", "", "none"),
        (
            r"^CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(?:IF\s+NOT\s+EXISTS\s+)?\w+\s+ON\s+"
            r"(?:ONLY\s+)?" + _T,
            _SUE,
            "online-build",
        ),
        (
            r"^CREATE\s+(?:UNIQUE\s+)?INDEX\s+(?:IF\s+NOT\s+EXISTS\s+)?\w+\s+ON\s+(?:ONLY\s+)?"
            + _T,
            "SHARE",
            "scan",
        ),
        (r"^DROP\s+INDEX\s+CONCURRENTLY\s+(?:IF\s+EXISTS\s+)?" + _T, _SUE, "online"),
        (r"^REINDEX\s+INDEX\s+CONCURRENTLY\s+" + _T, _SUE, "online-build"),
        (r"^DROP\s+INDEX\s+(?:IF\s+EXISTS\s+)?" + _T, _AE, "catalog"),
        (r"^ALTER\s+INDEX\s+(?:IF\s+EXISTS\s+)?" + _T + r"\s+RENAME\b", _SUE, "online"),
        (r"^CREATE\s+STATISTICS\s+.*?\bFROM\s+" + _T, _SUE, "online"),
        (
            r"^CREATE\s+(?:OR\s+REPLACE\s+)?(?:CONSTRAINT\s+)?TRIGGER\s+\w+\s+.*?\bON\s+" + _T,
            "SHARE ROW EXCLUSIVE",
            "catalog",
        ),
        (r"^DROP\s+TRIGGER\s+(?:IF\s+EXISTS\s+)?\w+\s+ON\s+" + _T, _AE, "catalog"),
        (r"^INSERT\s+INTO\s+" + _T, "ROW EXCLUSIVE", "online"),
        # A sequence's options: nextval() (an enqueue's id) waits for the catalog change.
        (r"^ALTER\s+SEQUENCE\s+(?:IF\s+EXISTS\s+)?" + _T, "SHARE ROW EXCLUSIVE", "catalog"),
        (r"^(?:UPDATE|DELETE\s+FROM)\s+" + _T, "ROW EXCLUSIVE", "rows"),
        (r"^ANALYZE\s+" + _T, _SUE, "online"),
    )
)
_ALTER_TABLE = re.compile(
    r"^ALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?" + _T + r"\s+(?P<actions>.*)$",
    re.IGNORECASE | re.DOTALL,
)
_CREATE_TABLE = re.compile(
    r"^CREATE\s+(?:UNLOGGED\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?" + _T, re.IGNORECASE
)
#: Defaults PostgreSQL computes per row: ADD COLUMN with one of them rewrites the table.
_VOLATILE_DEFAULT = re.compile(
    r"\bDEFAULT\s+[^,]*\b(?:random|clock_timestamp|gen_random_uuid|uuid_generate_\w+|nextval|"
    r"timeofday|txid_current)\s*\(",
    re.IGNORECASE,
)


def _split_actions(actions: str) -> list[str]:
    """The comma-separated actions of ALTER TABLE (commas inside parentheses kept)."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in actions:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    parts.append("".join(current).strip())
    return [part for part in parts if part]


def _add_constraint(upper: str) -> tuple[str, str]:
    mode = "SHARE ROW EXCLUSIVE" if "FOREIGN KEY" in upper else _AE
    if " USING INDEX " in upper:
        return _AE, "catalog"
    if " UNIQUE" in upper or " PRIMARY KEY" in upper:
        return _AE, "scan"  # builds an index under the lock
    return (mode, "catalog") if upper.endswith("NOT VALID") else (mode, "scan")


def _alter_column(upper: str) -> tuple[str, str]:
    if " TYPE " in f" {upper} ":
        return _AE, "rewrite"
    if "SET NOT NULL" in upper:
        return _AE, "scan"  # every row is checked under the lock
    if "SET STATISTICS" in upper:
        return _SUE, "online"
    return _AE, "catalog"  # SET/DROP DEFAULT, DROP NOT NULL


def _alter_table_action(action: str) -> tuple[str, str]:
    """(lock mode, kind) of one ALTER TABLE action; kinds as in _RULES."""
    upper = " ".join(action.upper().split())
    if upper.startswith("ALTER "):
        return _alter_column(upper)
    if upper.startswith("VALIDATE CONSTRAINT"):
        return _SUE, "online-scan"
    if upper.startswith(("SET (", "SET(", "RESET")):
        return _SUE, "online"  # storage parameters (fillfactor, autovacuum_*)
    if upper.startswith(("ENABLE TRIGGER", "DISABLE TRIGGER")):
        return "SHARE ROW EXCLUSIVE", "catalog"
    if upper.startswith(
        ("ADD CONSTRAINT", "ADD CHECK", "ADD FOREIGN", "ADD UNIQUE", "ADD PRIMARY")
    ):
        return _add_constraint(upper)
    if upper.startswith("ADD "):
        return (_AE, "rewrite") if _VOLATILE_DEFAULT.search(action) else (_AE, "catalog")
    if upper.startswith(("DROP ", "RENAME ")):
        return _AE, "catalog"
    return _AE, "unknown"


def _stronger(first: str, second: str) -> str:
    return first if LOCK_MODES.index(first) >= LOCK_MODES.index(second) else second


def created_table(statement: str) -> str | None:
    """The table a CREATE TABLE statement creates (None for any other statement)."""
    match = _CREATE_TABLE.match(statement)
    return match["table"] if match else None


_KIND_ORDER = ("online", "online-scan", "online-build", "catalog", "scan", "rewrite", "unknown")


def statement_locks(statement: str, new_tables: Container[str] = ()) -> list[LockUse]:
    """The table locks ``statement`` (a migration's, ``{schema}`` not rendered) takes.

    ``new_tables`` are tables created earlier in the same migration: nobody else uses
    them yet, so nothing the statement does to them disrupts the queue. A statement this
    function does not know is reported as ``blocking`` (review it by hand).
    """
    alter = _ALTER_TABLE.match(statement)
    if alter:
        mode, worst = "ACCESS SHARE", "online"
        for action in _split_actions(alter["actions"]):
            action_mode, kind = _alter_table_action(action)
            mode = _stronger(mode, action_mode)
            worst = max(worst, kind, key=_KIND_ORDER.index)
        return [_use(alter["table"], mode, worst, new_tables)]
    for pattern, mode, kind in _RULES:
        match = pattern.match(statement)
        if match is not None:
            if kind == "none":
                return []
            table = match["table"]
            return [_use(table, mode, kind, new_tables), *_reads(statement, table, new_tables)]
    return [LockUse("?", _AE, "blocking", "unknown statement: review its locks by hand")]


_WRITES = re.compile(r"^(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\b", re.IGNORECASE)
_READ = re.compile(
    r"\b(?:FROM|JOIN|USING)\s+(?:ONLY\s+)?\{schema\}\.(?P<table>" + _WORD + r")\b", re.IGNORECASE
)


def _reads(statement: str, target: str, new_tables: Container[str]) -> list[LockUse]:
    """The other tables an INSERT … SELECT, UPDATE … FROM or DELETE … USING reads (ACCESS
    SHARE): harmless alone, but a scan while the same transaction holds a write-blocking
    lock on the table (a trigger just created on it, say) blocks for as long as it reads."""
    if not _WRITES.match(statement):
        return []
    tables = dict.fromkeys(match["table"] for match in _READ.finditer(statement))
    return [
        _use(table, "ACCESS SHARE", "online-scan", new_tables)
        for table in tables
        if table != target
    ]


_NOTES = {
    "online": ("online", "blocks {blocks}"),
    "online-build": ("online", "blocks {blocks}; builds while the table is used"),
    "online-scan": ("online", "blocks {blocks}; reads the table once"),
    "catalog": ("brief", "blocks {blocks} for a catalog change only (milliseconds)"),
    "scan": ("blocking", "blocks {blocks} while it reads the whole table"),
    "rewrite": ("blocking", "blocks {blocks} while it rewrites the table"),
    "rows": ("blocking", "locks every row it changes until the step commits (use a batched step)"),
    "unknown": ("blocking", "unknown change: review its locks by hand"),
}
_SCANS = ("online-build", "online-scan", "scan", "rewrite", "rows")


#: Tables of a few rows (one per declared limit, paused queue or schedule): a statement
#: that changes some of their rows holds those rows' locks until its step commits, which
#: (in a transaction step, under lock_timeout) is milliseconds. On any other table such a
#: statement belongs in a batched step.
SMALL_TABLES = frozenset({"limits", "queue_pauses", "periodic"})


def _use(relation: str, mode: str, kind: str, new_tables: Container[str]) -> LockUse:
    if relation in new_tables:
        return LockUse(relation, mode, "none", "a table this migration creates: nobody uses it yet")
    if kind == "rows" and relation in SMALL_TABLES:
        return LockUse(
            relation,
            mode,
            "brief",
            "locks the rows it changes until the step commits (a table of a few rows)",
        )
    effect, note = _NOTES[kind]
    return LockUse(
        relation,
        mode,
        effect,  # type: ignore[arg-type]
        note.format(blocks=BLOCKS[mode]),
        scans=kind in _SCANS,
    )


@dataclasses.dataclass(frozen=True)
class StatementLocks:
    """A statement of a step (``summary``: its first words) and the locks it takes."""

    summary: str
    locks: tuple[LockUse, ...]


def step_locks(step: Step, new_tables: set[str]) -> list[StatementLocks]:
    """The locks of each statement of ``step``, as held in its transaction: a scan after
    a statement of the same transaction took a write-blocking lock on that table blocks
    for the whole scan. ``new_tables`` (tables created earlier in the migration) grows
    with the tables this step creates."""
    held: dict[str, str] = {}
    planned: list[StatementLocks] = []
    for statement in step.statements:
        locks = []
        for lock in statement_locks(statement, new_tables):
            if (
                step.kind == "batched"
                and lock.effect == "blocking"
                and lock.mode == "ROW EXCLUSIVE"
            ):
                lock = dataclasses.replace(
                    lock, effect="online", note=f"locks the rows of one batch of {step.size} ids"
                )
            elif step.kind == "batched" and lock.scans and lock.relation == step.table:
                lock = dataclasses.replace(
                    lock, scans=False, note=f"reads one batch of {step.size} ids at a time"
                )
            earlier = held.get(lock.relation)
            if (
                step.kind == "transaction"
                and earlier is not None
                and lock.scans
                and lock.effect != "none"
                and BLOCKS[earlier] != BLOCKS["ACCESS SHARE"]
                and not BLOCKS[earlier].startswith("nothing")
            ):
                lock = dataclasses.replace(
                    lock,
                    mode=_stronger(earlier, lock.mode),
                    effect="blocking",
                    note=f"reads the whole table while this transaction holds {earlier} on it"
                    f" (blocks {BLOCKS[earlier]}): put it in a step of its own",
                )
            held[lock.relation] = _stronger(held.get(lock.relation, "ACCESS SHARE"), lock.mode)
            locks.append(lock)
        created = created_table(statement)
        if created is not None:
            new_tables.add(created)
        planned.append(StatementLocks(summarize(statement), tuple(locks)))
    return planned
