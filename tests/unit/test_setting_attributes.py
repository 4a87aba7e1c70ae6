"""App and Worker show their settings through one read-only descriptor, ``Setting``: the
field of the same name of ``settings``, or the one a dotted path names (no database is
contacted)."""

from __future__ import annotations

import pytest

from pgtasks import App, Worker
from pgtasks._app.settings import Setting
from pgtasks._worker.settings import Setting as WorkerSetting

DSN = "postgresql://nobody@localhost:1/none"


def test_app_and_worker_use_the_same_descriptor() -> None:
    assert WorkerSetting is Setting
    shown = {name for name, value in vars(App).items() if isinstance(value, Setting)}
    assert {"poll_interval", "pool_min_size", "connect_attempts", "embedded_dir"} <= shown
    assert isinstance(vars(Worker)["poll_interval"], Setting)


def test_an_app_setting_reads_its_field_or_its_dotted_path() -> None:
    app = App(DSN, schema="unit_tests", poll_interval=2, pool_min_size=3, pool_max_size=4)
    assert app.poll_interval == 2.0 == app.settings.poll_interval
    assert (app.pool_min_size, app.pool_max_size) == (3, 4)
    assert app.pool_min_size == app.settings.pools.min_size
    assert app.connect_attempts == app.settings.pools.connect_attempts


def test_an_app_setting_is_read_only() -> None:
    app = App(DSN, schema="unit_tests", poll_interval=2)
    with pytest.raises(AttributeError, match="'poll_interval' of 'App' object has no setter"):
        app.poll_interval = 1.0  # type: ignore[misc]
    with pytest.raises(AttributeError, match="'pool_min_size' of 'App' object has no setter"):
        app.pool_min_size = 1  # type: ignore[misc]
    assert app.poll_interval == 2.0
