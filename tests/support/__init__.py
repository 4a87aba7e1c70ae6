"""Helpers shared by the test suite (the only test code test modules import).

- :mod:`.waiting`: wait on a condition with a timeout (tests never sleep).
- :mod:`.schemas`: schema names, dropping, and pre-migrated template schemas.
- :mod:`.snapshot`: the normalised description of a migrated schema (tests/schema.sql).
- :mod:`.environment`: the repository root, ``pgtasks`` command lines and the environment
  of a ``pgtasks`` subprocess.
- :mod:`.processes`: ``pgtasks worker`` / ``beat`` subprocesses with their logs.
- :mod:`.probe`: read a schema's jobs, workers and executions; waits and invariants.
- :mod:`.servers`: private PostgreSQL servers, a TCP proxy and server-side faults.
- :mod:`.inprocess`: a Worker running in a thread of the test process, and SQL helpers.
- :mod:`.population`: job and worker rows written directly for operations tests.

The task apps the subprocesses load are in ``tests/apps``; fixtures in conftest.py files.
"""

from __future__ import annotations
