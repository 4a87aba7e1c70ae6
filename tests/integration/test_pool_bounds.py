"""``Worker(..., min_concurrency=, max_concurrency=)``: the bounds a resize at runtime
(``pgtasks control pool_grow|pool_shrink``) keeps the pool within, as the CLI's
``--min-concurrency/--max-concurrency`` give them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pgtasks import App, ConfigurationError, Worker
from pgtasks._app import controls
from tests.support.inprocess import running_worker


def test_a_worker_made_in_python_resizes_within_the_bounds_it_was_given(
    make_app: Callable[..., App],
) -> None:
    app = make_app(heartbeat_interval=0.2, lease_timeout=5)
    with running_worker(app, concurrency=2, min_concurrency=1, max_concurrency=3) as worker:
        assert worker.settings.pool_bounds == (1, 3)
        worker_id = worker.worker_id
        assert worker_id is not None
        grown = controls.resize_pool(app, worker_id, 1, actor="test")
        assert (grown.before, grown.after, grown.applied) == (2, 3, True)
        with pytest.raises(
            controls.PoolChangeError, match="beyond the bounds it started with, 1 to 3"
        ):
            controls.resize_pool(app, worker_id, 1, actor="test")
        shrunk = controls.resize_pool(app, worker_id, -2, actor="test")
        assert (shrunk.before, shrunk.after, shrunk.applied) == (3, 1, True)
        with pytest.raises(controls.PoolChangeError, match="0 is beyond the bounds"):
            controls.resize_pool(app, worker_id, -1, actor="test")


def test_bounds_that_do_not_hold_the_concurrency_are_refused_with_both_named(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    with pytest.raises(ConfigurationError, match="min_concurrency=3 <= concurrency=2"):
        Worker(app, concurrency=2, min_concurrency=3)
    with pytest.raises(ConfigurationError, match="max_concurrency=4"):
        Worker(app, concurrency=5, max_concurrency=4)
    with pytest.raises(ConfigurationError, match="min_concurrency="):
        Worker(app, concurrency=2, min_concurrency=0)
