"""Tasks the benchmarks run. The schema comes from PGTASKS_SCHEMA (set by the runner)."""

from __future__ import annotations

import time

from pgtasks import App, JobContext

app = App(pool_max_size=4)


@app.task
def noop() -> None:
    """Does nothing: measures the framework, not the work."""


@app.task
async def anoop() -> None:
    """An ``async def`` no-op."""


@app.task
def pickup(sent: float) -> float:
    """Seconds from just before the producer's enqueue call to the start of this task."""
    return time.time() - sent


@app.task
def record(user: str, n: int) -> None:
    """Takes two keyword arguments (the enqueue benchmark's rows with arguments)."""


def _nothing() -> None:
    """A durable step's no-op function."""


@app.task(bind=True)
def durable(ctx: JobContext, steps: int) -> int:
    """``steps`` no-op durable steps (benchmarks/durable.py)."""
    for _ in range(steps):
        ctx.step("noop", _nothing)
    return steps


@app.task
def tenant_noop(tenant: int) -> None:
    """A no-op of a tenant, without a fair key (benchmarks/fairness.py's "before")."""


@app.task(fair_key=lambda tenant: tenant)
def fair_noop(tenant: int) -> None:
    """A no-op whose tenant is its fair key (benchmarks/fairness.py)."""


@app.task(sequence_key=lambda key: key)
def sequence_noop(key: int) -> None:
    """A no-op of sequence ``key`` (benchmarks/fairness.py)."""
