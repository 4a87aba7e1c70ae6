"""What ``pgtasks migrate --plan`` shows before anything runs (no SQL of its own): each pending
step, its kind and the locks its statements take (:class:`MigrationPlan`, made by
:meth:`Migrator.plan <pgtasks._store.migrator.Migrator.plan>` from :func:`plan_migrations`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..sql import Migration
from ..sql.steps import EFFECTS, StatementLocks, Step, step_locks


@dataclasses.dataclass(frozen=True)
class PlannedStep:
    """A step of a pending migration, what its statements lock, and whether an earlier,
    interrupted run already did it."""

    migration: Migration
    step: Step
    statements: tuple[StatementLocks, ...]
    done: bool

    @property
    def effect(self) -> str:
        effects = [lock.effect for statement in self.statements for lock in statement.locks]
        return max(effects, key=EFFECTS.index, default="none")


@dataclasses.dataclass(frozen=True)
class MigrationPlan:
    """What ``migrate`` would do to a schema (``pgtasks migrate --plan``)."""

    schema: str
    version: int
    head: int
    #: No migration is applied yet: each one runs as a single transaction on empty tables.
    fresh: bool
    steps: tuple[PlannedStep, ...]
    lock_timeout: float
    lock_retry_for: float

    @property
    def migrations(self) -> list[Migration]:
        seen: dict[int, Migration] = {}
        for planned in self.steps:
            seen.setdefault(planned.migration.version, planned.migration)
        return list(seen.values())

    def describe(self) -> str:
        """The plan as text: each pending step, its statements and the locks they take."""
        count = len(self.migrations)
        if not count:
            return f"schema {self.schema!r} is up to date (version {self.head})"
        lines = [
            f"schema {self.schema!r} is at version {self.version}, this code's is {self.head}:"
            f" {count} migration(s) to apply"
        ]
        if self.fresh:
            lines.append(
                "the schema is new (no migration applied): each migration runs as one"
                " transaction on empty tables, nothing waits on them"
            )
        for migration in self.migrations:
            lines += ["", f"{migration.label}"]
            steps = [planned for planned in self.steps if planned.migration is migration]
            for planned in steps:
                lines += self._describe_step(planned, len(migration.steps))
        return "\n".join(lines)

    def _describe_step(self, planned: PlannedStep, total: int) -> list[str]:
        step = planned.step
        how = {
            "transaction": (
                f"one transaction, lock_timeout {self.lock_timeout:g} s,"
                f" retried for up to {self.lock_retry_for:g} s"
            ),
            "concurrently": "outside a transaction",
            "batched": (
                f"in batches of {step.size} ids of {step.table}, one transaction each"
                f" (lock_timeout {self.lock_timeout:g} s)"
            ),
        }[step.kind]
        if self.fresh:
            how = "in the migration's one transaction"
        done = " (done by an earlier run)" if planned.done else ""
        lines = [f"  step {step.number} of {total}: {step.kind}, {how}{done}"]
        for statement in planned.statements:
            lines.append(f"    {statement.summary}")
            if self.fresh:
                continue
            lines += [f"      {lock.describe()}" for lock in statement.locks]
        return lines

    def as_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "version": self.version,
            "head": self.head,
            "fresh": self.fresh,
            "lock_timeout": self.lock_timeout,
            "lock_retry_for": self.lock_retry_for,
            "steps": [
                {
                    "migration": planned.migration.label,
                    "step": planned.step.number,
                    "kind": planned.step.kind,
                    "done": planned.done,
                    "effect": "none" if self.fresh else planned.effect,
                    "statements": [
                        {
                            "statement": statement.summary,
                            "locks": [
                                {
                                    "relation": lock.relation,
                                    "mode": lock.mode,
                                    "effect": lock.effect,
                                    "note": lock.note,
                                }
                                for lock in statement.locks
                            ],
                        }
                        for statement in planned.statements
                    ],
                }
                for planned in self.steps
            ],
        }


def plan_migrations(
    migrations: Sequence[Migration],
) -> dict[tuple[int, int], tuple[StatementLocks, ...]]:
    """The locks of every step of ``migrations``, by (version, step number)."""
    locks: dict[tuple[int, int], tuple[StatementLocks, ...]] = {}
    for migration in migrations:
        new_tables: set[str] = set()
        for step in migration.steps:
            locks[(migration.version, step.number)] = tuple(step_locks(step, new_tables))
    return locks
