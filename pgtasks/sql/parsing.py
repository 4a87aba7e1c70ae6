"""A migration file parsed into steps (pure: parsing only; the step kinds are described in
steps.py): its statements split with quotes, comments and dollar quotes respected, and
grouped under the ``-- pgtasks:step`` marker lines into :class:`Step` values."""

from __future__ import annotations

import dataclasses
import re
from typing import Literal

StepKind = Literal["transaction", "concurrently", "batched"]
STEP_KINDS: tuple[StepKind, ...] = ("transaction", "concurrently", "batched")


_MARKER = re.compile(r"^--\s*pgtasks:step\s+(?P<kind>\w+)(?P<options>(?:\s+\w+=\S+)*)\s*$")
_OPTION = re.compile(r"(\w+)=(\S+)")
_WORD = r"[A-Za-z_][A-Za-z0-9_]*"
#: A relation name as migrations write it: ``{schema}.name`` (or a bare name).
_NAME = rf"(?:\{{schema\}}\.)?(?P<{{group}}>{_WORD})"


def _name(group: str) -> str:
    return _NAME.replace("{group}", group)


_CONCURRENT_FORMS = (
    re.compile(
        r"^CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(?:IF\s+NOT\s+EXISTS\s+)?"
        + _name("index")
        + r"\s+ON\s+(?:ONLY\s+)?"
        + _name("table")
        + r"\b",
        re.IGNORECASE | re.DOTALL,
    ),
    re.compile(
        r"^DROP\s+INDEX\s+CONCURRENTLY\s+(?:IF\s+EXISTS\s+)?" + _name("index") + r"\s*;?\s*$",
        re.IGNORECASE | re.DOTALL,
    ),
    re.compile(
        r"^REINDEX\s+INDEX\s+CONCURRENTLY\s+" + _name("index") + r"\s*;?\s*$",
        re.IGNORECASE | re.DOTALL,
    ),
)
_CONCURRENTLY = re.compile(r"\bCONCURRENTLY\s+", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Step:
    """One step of a migration: ``number`` counts from 1 within its migration."""

    number: int
    kind: StepKind
    text: str = dataclasses.field(repr=False)
    #: batched: the table whose ids are walked, and how many ids per batch.
    table: str | None = None
    size: int = 0

    @property
    def statements(self) -> list[str]:
        return split_statements(self.text)

    def index_name(self) -> str:
        """concurrently: the name of the index the statement builds, drops or rebuilds."""
        for form in _CONCURRENT_FORMS:
            match = form.match(self.statements[0])
            if match:
                return match["index"]
        raise ValueError(f"step {self.number} ({self.kind}) names no index")

    def table_name(self) -> str:
        """batched: the table whose ids the step walks."""
        if not self.table:
            raise ValueError(f"step {self.number} ({self.kind}) names no table")
        return self.table

    @property
    def builds_index(self) -> bool:
        return self.kind == "concurrently" and self.statements[0].upper().startswith("CREATE")

    def in_transaction_text(self) -> str:
        """The step as statements that may run inside a transaction, for a schema being
        created (its tables are empty): CONCURRENTLY dropped, a batched statement run once
        over every id."""
        if self.kind == "concurrently":
            return _CONCURRENTLY.sub("", self.text, count=1)
        if self.kind == "batched":
            return (
                self.text.replace("%(start)s", "(-9223372036854775807 - 1)")
                .replace("%(stop)s", "9223372036854775807")
                .replace("%%", "%")
            )
        return self.text


def parse_steps(text: str, *, where: str = "migration") -> tuple[Step, ...]:
    """Split a migration file on its ``-- pgtasks:step`` markers (none: one transaction)."""
    chunks: list[tuple[str, dict[str, str], list[str]]] = [("transaction", {}, [])]
    for line in text.splitlines():
        match = _MARKER.match(line.strip())
        if match:
            kind = match["kind"]
            if kind not in STEP_KINDS:
                raise ValueError(
                    f"{where}: unknown step kind {kind!r} (use {', '.join(STEP_KINDS)})"
                )
            chunks.append((kind, dict(_OPTION.findall(match["options"])), []))
        else:
            chunks[-1][2].append(line)
    steps: list[Step] = []
    for index, (kind, options, lines) in enumerate(chunks):
        body = "\n".join(lines).strip()
        if index == 0 and not split_statements(body):
            continue  # the header comments before the first marker
        number = len(steps) + 1
        steps.append(_step(number, kind, body, options, f"{where} step {number}"))
    if not steps:
        raise ValueError(f"{where}: no statement")
    return tuple(steps)


def _step(number: int, kind: str, body: str, options: dict[str, str], where: str) -> Step:
    statements = split_statements(body)
    if not statements:
        raise ValueError(f"{where}: no statement")
    if kind == "transaction":
        if options:
            raise ValueError(f"{where}: a transaction step takes no options")
        return Step(number, "transaction", body)
    if len(statements) != 1:
        raise ValueError(f"{where}: a {kind} step holds exactly one statement")
    if kind == "concurrently":
        if options:
            raise ValueError(f"{where}: a concurrently step takes no options")
        if not any(form.match(statements[0]) for form in _CONCURRENT_FORMS):
            raise ValueError(
                f"{where}: a concurrently step is one CREATE [UNIQUE] INDEX CONCURRENTLY"
                " name ON table, DROP INDEX CONCURRENTLY name or REINDEX INDEX CONCURRENTLY"
                " name statement"
            )
        return Step(number, "concurrently", body)
    table, size = options.get("table"), options.get("size", "10000")
    if not table or not re.fullmatch(_WORD, table) or not size.isdigit() or int(size) < 1:
        raise ValueError(f"{where}: a batched step needs table=<name> and size=<ids per batch>")
    if set(options) - {"table", "size"}:
        raise ValueError(f"{where}: a batched step takes table= and size= only")
    if "%(start)s" not in body or "%(stop)s" not in body:
        raise ValueError(f"{where}: a batched statement uses %(start)s <= id < %(stop)s")
    return Step(number, "batched", body, table=table, size=int(size))


# -- statements ---------------------------------------------------------------------------
def _skip_quoted(text: str, index: int) -> int:
    """The index after the quoted string or identifier starting at ``index``."""
    quote, end, length = text[index], index + 1, len(text)
    while end < length:
        if text[end] == quote:
            if end + 1 < length and text[end + 1] == quote:
                end += 2
                continue
            return end + 1
        end += 1
    return length


def _skip_special(text: str, index: int) -> tuple[int, str] | None:
    """What starts at ``index`` that is not plain SQL: (its end, what stands for it)."""
    if text.startswith("--", index):
        end = text.find("\n", index)
        return (len(text) if end < 0 else end + 1), "\n"
    if text.startswith("/*", index):
        end = text.find("*/", index + 2)
        return (len(text) if end < 0 else end + 2), " "
    char = text[index]
    if char in ("'", '"'):
        end = _skip_quoted(text, index)
        return end, text[index:end]
    if char == "$":
        match = re.match(r"\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$", text[index:])
        if match:
            tag = match.group(0)
            end = text.find(tag, index + len(tag))
            end = len(text) if end < 0 else end + len(tag)
            return end, text[index:end]
    return None


def split_statements(text: str) -> list[str]:
    """The statements of a SQL script (comments outside quoted text dropped, each without
    its ``;`` and stripped), aware of quotes, quoted identifiers and dollar-quoted bodies
    (kept as written: a function body's own comments and lines stay)."""
    statements: list[str] = []
    current: list[str] = []
    index = 0
    while index < len(text):
        special = _skip_special(text, index)
        if special is not None:
            index, kept = special
            current.append(kept)
            continue
        if text[index] == ";":
            statements.append("".join(current).strip())
            current = []
        else:
            current.append(text[index])
        index += 1
    statements.append("".join(current).strip())
    return [statement for statement in statements if statement]
