"""The app that acceptance tests run in real ``pgtasks beat`` / ``pgtasks schedules``.

Configured from the environment: ``PGTASKS_DSN`` and ``PGTASKS_TEST_SCHEMA`` (the
test's migrated schema). ``PGTASKS_TEST_CLOCK_SKEW`` (seconds, may be negative) makes
this process's wall clock wrong: ``time.time``, ``time.time_ns`` and
``datetime.datetime.now/utcnow/today`` are shifted, including in already imported
pgtasks and croniter modules, so a beat that read the host's clock would schedule at
the wrong times. ``time.monotonic`` (durations, not dates) is left alone.

The module-level ``app`` is built on first access, so tests can import
:func:`declare_schedules` without these environment variables.
"""

from __future__ import annotations

import datetime as datetime_module
import os
import sys
import time
from datetime import timedelta
from typing import Any

from pgtasks import App
from tests.apps import lazy_app
from tests.apps._environment import environment_app

#: Schedule names the tests look up.
EVERY_SECOND_CRON = "every-second-cron"
EVERY_SECOND = "every-second"
BERLIN_NIGHTLY = "berlin-nightly"


def declare_schedules(app: App) -> None:
    """One task, three schedules: 6-field cron and every= each second, a DST-prone cron."""

    @app.periodic(cron="30 2 * * *", tz="Europe/Berlin", name=BERLIN_NIGHTLY)
    @app.periodic(every=timedelta(seconds=1), name=EVERY_SECOND, kwargs={"source": "every"})
    @app.periodic(cron="* * * * * *", name=EVERY_SECOND_CRON, kwargs={"source": "cron"})
    @app.task(name="beat_app.record")
    def record(source: str = "nightly") -> str:
        return source


def skew_clock(seconds: float) -> None:
    """Shift this process's wall clock by ``seconds`` (see the module docstring)."""
    real_time, real_time_ns = time.time, time.time_ns
    real_datetime = datetime_module.datetime
    shift = timedelta(seconds=seconds)

    class SkewedType(type):
        # Real datetimes still pass isinstance() checks against the replacement.
        def __instancecheck__(cls, instance: object) -> bool:
            return isinstance(instance, real_datetime)

        def __subclasscheck__(cls, subclass: type) -> bool:
            return issubclass(subclass, real_datetime)

    class SkewedDatetime(datetime_module.datetime, metaclass=SkewedType):
        @classmethod
        def now(cls, tz: datetime_module.tzinfo | None = None) -> Any:
            return real_datetime.now(tz) + shift

        @classmethod
        def utcnow(cls) -> Any:
            return real_datetime.now(datetime_module.timezone.utc).replace(tzinfo=None) + shift

        @classmethod
        def today(cls) -> Any:
            return real_datetime.now() + shift

    time.time = lambda: real_time() + seconds
    time.time_ns = lambda: real_time_ns() + int(seconds * 1e9)
    datetime_module.datetime = SkewedDatetime  # type: ignore[misc]
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in ("pgtasks", "croniter", "tests") and (
            getattr(module, "datetime", None) is real_datetime
        ):
            module.datetime = SkewedDatetime  # type: ignore[attr-defined]


def build_app() -> App:
    skew = os.environ.get("PGTASKS_TEST_CLOCK_SKEW")
    if skew:
        skew_clock(float(skew))
    app = environment_app(
        connect_timeout=3.0,
    )
    declare_schedules(app)
    return app


#: ``app`` is built on first access, so importing this module needs no environment.
__getattr__ = lazy_app(build_app, __name__)
