"""The apps of ``python -m benchmarks --limits``' worker rounds (PGTASKS_DSN, PGTASKS_SCHEMA).

``plain_app`` declares no limit (its workers never ask for limited jobs); ``limited_app``
declares the limits of benchmarks/limits.py's build_app, under the same task names.
"""

from __future__ import annotations

from pgtasks import App

plain_app = App()
limited_app = App()


@plain_app.task(name="bench.plain")
def plain(n: int) -> None:
    """A no-op."""


@limited_app.task(name="bench.plain")
def limited_plain(n: int) -> None:
    """A no-op."""


@limited_app.task(name="bench.task_limited", concurrency=50)
def task_limited(n: int) -> None:
    """A no-op; at most 50 running at once across all workers."""


@limited_app.task(name="bench.key_limited", concurrency=1, concurrency_key=lambda key, **_: key)
def key_limited(key: int, n: int) -> None:
    """A no-op; at most one running per key."""
