"""The repository root, ``pgtasks`` command lines and the environment of a subprocess.

Subprocesses run from the repository root (so ``tests.apps.*`` and ``examples`` import)
with the app found through ``-A``: the variables that would point them elsewhere are
removed from the inherited environment.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Inherited variables a test subprocess must not see: the test sets what it needs.
NOT_INHERITED = (
    "PGTASKS_APP",
    "DATABASE_URL",
    "PGTASKS_SCHEMA",
    "PGTASKS_EXAMPLE_SCHEMA",
    "PGTASKS_TEST_CLOCK_SKEW",
    "PGTASKS_SESSION_DSN",
    "PGTASKS_REPLICA_DSN",
)


def forget_connection_environment() -> None:
    """Remove PGTASKS_SESSION_DSN and PGTASKS_REPLICA_DSN from this process's environment:
    test Apps get their connections from the fixtures, never from the caller's shell."""
    for name in ("PGTASKS_SESSION_DSN", "PGTASKS_REPLICA_DSN"):
        os.environ.pop(name, None)


def pgtasks_command(*arguments: str) -> list[str]:
    """``python -m pgtasks ARGUMENTS`` with this interpreter."""
    return [sys.executable, "-m", "pgtasks", *arguments]


def pgtasks_env(
    dsn: str, schema: str, *, schema_variable: str = "PGTASKS_TEST_SCHEMA", **extra: str
) -> dict[str, str]:
    """This process's environment for a subprocess on ``dsn`` and ``schema``.

    The test apps (tests/apps) read ``PGTASKS_DSN`` and ``PGTASKS_TEST_SCHEMA``; apps
    configured like a user's read ``PGTASKS_SCHEMA`` (``schema_variable``). Output is
    unbuffered, so logs can be read while the process runs.
    """
    env = {key: value for key, value in os.environ.items() if key not in NOT_INHERITED}
    env.update({"PGTASKS_DSN": dsn, schema_variable: schema, "PYTHONUNBUFFERED": "1"})
    pooled = via_pgbouncer(dsn)
    if pooled is not None:
        # Through PgBouncer (PGTASKS_TEST_VIA_PGBOUNCER=1): the app's dsn is the pooler,
        # its session_dsn the test server itself.
        env.update({"PGTASKS_DSN": pooled, "PGTASKS_SESSION_DSN": dsn})
    env.update(extra)
    return env


def via_pgbouncer(dsn: str) -> str | None:
    """PgBouncer's DSN when test Apps on ``dsn`` go through it (PGTASKS_TEST_VIA_PGBOUNCER=1
    and ``dsn`` is the test server PGTASKS_TEST_PGBOUNCER_DSN pools), else None."""
    if os.environ.get("PGTASKS_TEST_VIA_PGBOUNCER") != "1":
        return None
    pooled = os.environ.get("PGTASKS_TEST_PGBOUNCER_DSN")
    if not pooled:
        raise RuntimeError("PGTASKS_TEST_VIA_PGBOUNCER=1 needs PGTASKS_TEST_PGBOUNCER_DSN")
    return pooled if dsn == os.environ.get("PGTASKS_TEST_DSN") else None
