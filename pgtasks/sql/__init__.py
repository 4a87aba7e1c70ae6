"""The SQL pgtasks runs: named queries (``<area>.sql``) and numbered migrations, each made
of steps (steps.py).

Pure module: reads the package's own files, composes nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from importlib import resources
from typing import Literal, TypeVar, cast

from .steps import Step, parse_steps

T = TypeVar("T")
Cardinality = Literal["one", "many", "exec", "execrows"]

_HEADER = re.compile(r"^-- name: (?P<name>\w+) :(?P<cardinality>one|many|exec|execrows)\s*$")
#: A fragment: text several statements of the package share, written ``{<name>}`` in them.
_FRAGMENT = re.compile(r"^-- fragment: (?P<name>\w+)\s*$")
_MIGRATION_FILE = re.compile(r"^(?P<version>\d{4})_(?P<name>\w+)\.sql$")


@dataclasses.dataclass(frozen=True)
class Query:
    name: str
    cardinality: Cardinality
    description: str
    text: str = dataclasses.field(repr=False)


@dataclasses.dataclass(frozen=True)
class Migration:
    """A numbered migration file: ``text`` is the whole file, ``steps`` its steps (one
    transaction for a file without ``-- pgtasks:step`` markers)."""

    version: int
    name: str
    text: str = dataclasses.field(repr=False)
    steps: tuple[Step, ...] = dataclasses.field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.steps:
            where = f"migration {self.version:04d}_{self.name}"
            object.__setattr__(self, "steps", parse_steps(self.text, where=where))

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"

    @property
    def online(self) -> bool:
        """Whether it has steps beyond one transaction (an index built concurrently, a
        backfill in batches)."""
        return any(step.kind != "transaction" for step in self.steps)


def parse_queries(source: str) -> dict[str, Query]:
    """Split a queries file on its ``-- name:`` headers."""
    queries: dict[str, Query] = {}
    current: tuple[str, Cardinality] | None = None
    lines: list[str] = []

    def flush() -> None:
        if current is None:
            return
        name, cardinality = current
        comments = [line for line in lines if line.startswith("--")]
        body = "\n".join(line for line in lines if line.strip()).strip()
        description = comments[0][2:].strip() if comments else ""
        queries[name] = Query(name, cardinality, description, body)

    for line in source.splitlines():
        match = _HEADER.match(line)
        if match:
            flush()
            name = match["name"]
            if name in queries:
                raise ValueError(f"query {name!r} is defined twice")
            current = (name, cast(Cardinality, match["cardinality"]))
            lines = []
        elif _FRAGMENT.match(line):  # a fragment ends the query before it
            flush()
            current = None
        elif current is not None:
            lines.append(line)
    flush()
    return queries


def parse_fragments(source: str) -> dict[str, str]:
    """The fragments of a queries file: each ``-- fragment: <name>`` header up to the next
    header, without its comment lines (the first is its description)."""
    fragments: dict[str, str] = {}
    current: str | None = None
    for line in source.splitlines():
        fragment = _FRAGMENT.match(line)
        if fragment:
            current = fragment["name"]
            if current in fragments:
                raise ValueError(f"fragment {current!r} is defined twice")
            fragments[current] = ""
        elif _HEADER.match(line):
            current = None
        elif current is not None and line.strip() and not line.lstrip().startswith("--"):
            fragments[current] += line + "\n"
    return {name: text.strip() for name, text in fragments.items()}


@functools.cache
def load_queries() -> dict[str, Query]:
    """Every named query of the package: ``queries.sql`` and the other ``*.sql`` files here."""
    return _merged(parse_queries, "query")


@functools.cache
def load_fragments() -> dict[str, str]:
    """Every fragment of the package's ``*.sql`` files, by name."""
    return _merged(parse_fragments, "fragment")


def _merged(parse: Callable[[str], dict[str, T]], kind: str) -> dict[str, T]:
    """What ``parse`` finds in each ``*.sql`` file here (``queries.sql`` first), by name;
    a name defined twice is refused."""
    merged: dict[str, T] = {}
    files = sorted(
        (entry for entry in resources.files(__package__).iterdir() if entry.name.endswith(".sql")),
        key=lambda entry: (entry.name != "queries.sql", entry.name),
    )
    for entry in files:
        for name, item in parse(entry.read_text("utf-8")).items():
            if name in merged:
                raise ValueError(f"{kind} {name!r} is defined twice ({entry.name})")
            merged[name] = item
    return merged


@functools.cache
def load_migrations() -> tuple[Migration, ...]:
    folder = resources.files(__package__).joinpath("migrations")
    migrations = []
    for entry in folder.iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match:
            migrations.append(
                Migration(int(match["version"]), match["name"], entry.read_text("utf-8"))
            )
    migrations.sort(key=lambda migration: migration.version)
    check_versions([migration.version for migration in migrations], IN_FLIGHT)
    return tuple(migrations)


#: Versions assigned to changes not merged yet, whose absence is no gap: a later version
#: landed first. Remove each as its migration lands (tests/unit/test_sql.py fails while
#: one is both here and in the folder); empty, the versions must be exactly 1..N.
IN_FLIGHT: frozenset[int] = frozenset()


def check_versions(versions: list[int], in_flight: frozenset[int] = frozenset()) -> None:
    """Refuse migration versions that are not 1..N, each once (sorted): a repeated number
    or a gap (a file missing, or numbered past the next free number) names itself;
    ``in_flight`` versions may be missing."""
    repeated = sorted({version for version in versions if versions.count(version) > 1})
    if repeated:
        raise RuntimeError(
            f"migration versions must be unique: {', '.join(f'{v:04d}' for v in repeated)}"
            " appear more than once"
        )
    missing = sorted(set(range(1, max(versions, default=0) + 1)) - set(versions) - in_flight)
    if missing:
        raise RuntimeError(
            "migration versions must be contiguous from 0001: missing"
            f" {', '.join(f'{v:04d}' for v in missing)} (before"
            f" {min(v for v in versions if v > missing[0]):04d}); number a new migration"
            " with the next free version"
        )
